// The API's side of the direct wake (BERTH_OPERATOR_URL): one POST /wake per address the operator's
// name resolves to, with the token and the wake's time; a refusal is logged, never thrown.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { operatorWake } from '../src/dedicated/kubernetes/operator-wake.ts';
import { eventually } from '@berth/test/support/eventually';

const TOKEN = 'a-wake-token-of-length';
const closers: (() => void)[] = [];
afterEach(() => closers.splice(0).forEach((c) => c()));

async function operator(status: number) {
  const seen: { method?: string; url?: string; auth?: string; type?: string; body: string }[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({
        method: req.method,
        url: req.url,
        auth: req.headers.authorization,
        type: req.headers['content-type'],
        body,
      });
      res.writeHead(status, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => server.close());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

function logs() {
  const lines: { level: string; msg: string; obj: Record<string, unknown> }[] = [];
  const at = (level: string) => (obj: Record<string, unknown>, msg: string) =>
    lines.push({ level, msg, obj });
  return { lines, logger: { warn: at('warn'), debug: at('debug') } as unknown as Logger };
}

describe('operatorWake', () => {
  it('posts the endpoint and the wake time to /wake with the bearer token', async () => {
    const op = await operator(202);
    const { lines, logger } = logs();
    operatorWake(op.url, TOKEN, logger)('endpt-abc', '2026-11-29T03:00:00.000Z');
    await eventually(() => expect(op.seen).toHaveLength(1), { timeout: 5_000 });
    expect(op.seen[0]).toEqual({
      method: 'POST',
      url: '/wake',
      auth: `Bearer ${TOKEN}`,
      type: 'application/json',
      body: '{"endpoint":"endpt-abc","requestedAt":"2026-11-29T03:00:00.000Z"}',
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(lines.filter((l) => l.level === 'warn')).toEqual([]);
  });

  it('logs a warning naming the answer when no replica took it (a wrong token: 401)', async () => {
    const op = await operator(401);
    const { lines, logger } = logs();
    operatorWake(op.url, TOKEN, logger)('endpt-abc', new Date().toISOString());
    const warn = await eventually(() => lines.find((l) => l.level === 'warn') ?? false, { timeout: 5_000 });
    expect(warn.msg).toBe(
      'the operator did not take the wake directly; the wake annotation will wake the endpoint',
    );
    expect(warn.obj.answers).toEqual([expect.stringMatching(/^127\.0\.0\.1: HTTP 401$/)]);
  });

  it('logs a warning when the operator cannot be reached, and never throws', async () => {
    const op = await operator(202);
    closers.splice(0).forEach((c) => c()); // nothing listens there now
    const { lines, logger } = logs();
    expect(() => operatorWake(op.url, TOKEN, logger)('endpt-abc', new Date().toISOString())).not.toThrow();
    const warn = await eventually(() => lines.find((l) => l.level === 'warn') ?? false, { timeout: 5_000 });
    expect(String(warn.obj.answers)).toMatch(/ECONNREFUSED/);
  });
});
