// A streaming request held while its endpoint wakes gets its answer's headers at once and an SSE
// comment every few seconds (`: waking <phase> <elapsed>s`): proxies in between cut connections
// that stay silent for 60 s, a real wake takes minutes, and the OpenAI SDKs ignore comments. The
// answer then continues the same stream (forward() leaves headers already sent alone).
import type { Response } from 'express';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
} as const;

/** Starts the heartbeats; the returned function stops them. */
export function wakeHeartbeat(res: Response, phase: () => string, intervalMs: number): () => void {
  const started = Date.now();
  res.status(200);
  for (const [name, value] of Object.entries(SSE_HEADERS)) res.setHeader(name, value);
  const beat = () => {
    if (res.writableEnded || res.destroyed) return;
    res.write(`: waking ${phase()} ${Math.round((Date.now() - started) / 1000)}s\n\n`);
  };
  beat();
  const timer = setInterval(beat, intervalMs);
  return () => clearInterval(timer);
}
