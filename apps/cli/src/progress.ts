// Following an endpoint through PROVISIONING → ONLINE: on a terminal a spinner with the elapsed
// time, the label and the current reason on one line; otherwise (logs, CI, tests) one line per
// change. A wake names its stage as the dashboard does, and ends with its receipt. A failure prints
// the reason, the message and the last lines of the endpoint's logs.
// The words for a wake are the dashboard's own (./wake-text.ts, which the dashboard imports).
import { receiptText, stageText } from './wake-text.ts';
import type { Client, Endpoint } from './client.ts';
import { colour } from './output.ts';

export class EndpointFailed extends Error {}

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

export async function follow(
  client: Client,
  id: string,
  opts: { until: 'up' | 'gone'; timeoutSeconds: number; intervalMs?: number },
): Promise<Endpoint | undefined> {
  const err = process.stderr;
  const tty = err.isTTY;
  const started = Date.now();
  let last = '';
  let frame = 0;
  let woke = false;
  const elapsed = () => `${Math.round((Date.now() - started) / 1000)}s`;
  for (;;) {
    let e: Endpoint | undefined;
    try {
      e = (await client.call('get', '/api/endpoints/{id}', { params: { id } })).data;
    } catch (error) {
      if ((error as { status?: number }).status === 404 && opts.until === 'gone') {
        if (tty) err.write('\r\x1b[K');
        err.write(`${id}: terminated (${elapsed()})\n`);
        return undefined;
      }
      throw error;
    }
    // A change not yet acted on (a new generation) still shows the old status: keep waiting.
    const current = e.observedGeneration === null || e.observedGeneration >= e.generation;
    const wake = e.wake?.inProgress ? e.wake : undefined;
    if (wake || e.status === 'waking' || e.status === 'hibernated') woke = true;
    // A wake's own age (it may have begun before this command), else the time this command waited.
    const since = () =>
      typeof wake?.elapsedSeconds === 'number' ? `${Math.round(wake.elapsedSeconds)}s` : elapsed();
    // Asked to wake, a sleeping endpoint is waking already (the operator has yet to say so).
    const state = wake ? `WAKING UP (${stageText(wake)})` : `${e.label}${e.reason ? ` (${e.reason})` : ''}`;
    if (tty) {
      err.write(`\r\x1b[K${FRAMES[frame++ % FRAMES.length]} ${id}: ${state} ${since()}`);
    } else if (state !== last) {
      err.write(`${id}: ${state} ${since()}\n`);
    }
    last = state;
    if (current && e.status === 'failed') {
      if (tty) err.write('\n');
      const logs = await client
        .raw('get', `/api/endpoints/${encodeURIComponent(id)}/logs`)
        .then((r) => r.text())
        .catch(() => '');
      const tail = logs.trimEnd().split('\n').slice(-10).join('\n');
      throw new EndpointFailed(
        `${id} failed: ${e.reason}: ${e.message ?? ''}${tail ? `\n\nLast log lines:\n${tail}` : ''}`,
      );
    }
    if (opts.until === 'up' && current && e.status === 'up') {
      if (tty) err.write('\r\x1b[K');
      err.write(`${colour(32, '✓', err)} ${id}: ONLINE after ${elapsed()}\n`);
      if (woke && e.wake && !e.wake.inProgress) {
        const r = receiptText(e.wake);
        err.write(`  woke in ${r.summary}: ${r.stages}\n`);
      }
      return e;
    }
    if (Date.now() - started > opts.timeoutSeconds * 1000) {
      if (tty) err.write('\n');
      throw new Error(`Timed out after ${opts.timeoutSeconds}s waiting for ${id} (still ${state})`);
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? (tty ? 250 : 1000)));
  }
}
