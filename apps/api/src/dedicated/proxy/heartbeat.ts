// A streaming request held while its endpoint wakes gets its answer's headers at once and an SSE
// comment every few seconds (`: waking <stage> <elapsed>s`, the stage of the wake's receipt and the
// seconds since its signal): proxies in between cut connections that stay silent for 60 s, a real
// wake takes minutes, and the OpenAI SDKs ignore comments. The answer then continues the same stream
// (forward() leaves headers already sent alone), after a comment with the time the call was held.
import type { Response } from 'express';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
} as const;

/** On the answer to a call that was held through a wake. */
export const COLD_START_HEADER = 'x-berth-cold-start';
/** How long that call was held, in milliseconds (a held stream, whose headers went first, says it in wakeMsComment). */
export const WAKE_MS_HEADER = 'x-berth-wake-ms';

/** The held stream's last comment before the answer: `: x-berth-wake-ms <ms>`. */
export function wakeMsComment(ms: number): string {
  return `: ${WAKE_MS_HEADER} ${ms}\n\n`;
}

/**
 * Starts the heartbeats; the returned function stops them. The first goes out on the next turn of the
 * event loop, not at once: a call that turns out not to wait (a replica was Ready already, the phase
 * not yet written) is answered as any other, without a cold-start header or comments.
 */
export function wakeHeartbeat(
  res: Response,
  progress: () => { stage: string; seconds: number },
  intervalMs: number,
): () => void {
  const beat = () => {
    if (res.writableEnded || res.destroyed) return;
    if (!res.headersSent) {
      res.status(200);
      for (const [name, value] of Object.entries(SSE_HEADERS)) res.setHeader(name, value);
      res.setHeader(COLD_START_HEADER, 'true');
    }
    const { stage, seconds } = progress();
    res.write(`: waking ${stage} ${Math.round(seconds)}s\n\n`);
  };
  let timer: NodeJS.Timeout | undefined = setTimeout(() => {
    beat();
    timer = setInterval(beat, intervalMs);
  }, 0);
  return () => {
    clearTimeout(timer);
    clearInterval(timer);
  };
}
