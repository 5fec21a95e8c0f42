// The wake told to the operator directly (its POST /wake, operator/src/wake-route.ts), alongside
// the wake annotation: the leader's pass runs at once instead of after the API server's write and
// the watch event (two round trips of a busy control plane). Best effort: the annotation is the
// record, so a failure here is logged and costs only the time the hint would have saved.
//
// The chart's operator Service for this is headless: its name resolves to every operator replica,
// each is asked, and the standby answers 409 (not the leader). The addresses are looked up again
// every 10 s, so a new leader is reached without a restart.
import { lookup } from 'node:dns/promises';
import { request } from 'node:http';
import type { Logger } from 'pino';

const LOOKUP_TTL_MS = 10_000;
const TIMEOUT_MS = 2_000;

export type OperatorWake = (id: string, requestedAt: string) => void;

export function operatorWake(url: string, token: string, logger: Logger): OperatorWake {
  const base = new URL(url);
  const port = Number(base.port || 80);
  const path = `${base.pathname.replace(/\/$/, '')}/wake`;
  const host = base.hostname.replace(/^\[|\]$/g, '');
  let addresses: { at: number; list: Promise<string[]> } | undefined;
  const resolve = (): Promise<string[]> => {
    if (!addresses || Date.now() - addresses.at > LOOKUP_TTL_MS) {
      const list = lookup(host, { all: true }).then((a) => a.map((x) => x.address));
      const entry = { at: Date.now(), list };
      // A failed lookup is not kept: the next wake looks up again (a newer entry stays).
      list.catch(() => addresses === entry && (addresses = undefined));
      addresses = entry;
    }
    return addresses.list;
  };

  const post = (address: string, body: string) =>
    new Promise<number>((done, fail) => {
      const req = request(
        {
          host: address,
          port,
          path,
          method: 'POST',
          timeout: TIMEOUT_MS,
          headers: {
            host: base.host,
            authorization: `Bearer ${token}`,
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
          },
        },
        (res) => {
          res.resume();
          done(res.statusCode ?? 0);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${TIMEOUT_MS} ms`)));
      req.on('error', fail);
      req.end(body);
    });

  return (id, requestedAt) => {
    const body = JSON.stringify({ endpoint: id, requestedAt });
    void resolve()
      .then((list) => Promise.allSettled(list.map((a) => post(a, body).then((status) => ({ a, status })))))
      .then((answers) => {
        const leader = answers.some((r) => r.status === 'fulfilled' && r.value.status < 300);
        const trouble = answers.filter(
          (r) => r.status === 'rejected' || (r.value.status !== 409 && r.value.status >= 300),
        );
        const detail = trouble.map((r) =>
          r.status === 'rejected'
            ? String((r.reason as Error).message)
            : `${r.value.a}: HTTP ${r.value.status}`,
        );
        if (!leader)
          logger.warn(
            { endpoint: id, operator: url, answers: detail },
            'the operator did not take the wake directly; the wake annotation will wake the endpoint',
          );
        else if (detail.length)
          logger.debug({ endpoint: id, answers: detail }, 'operator wake: some replicas did not answer');
      })
      .catch((err: unknown) =>
        logger.warn(
          { endpoint: id, operator: url, err: (err as Error).message },
          'could not reach the operator to wake the endpoint; the wake annotation will',
        ),
      );
  };
}
