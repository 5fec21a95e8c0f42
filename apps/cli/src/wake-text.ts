// A wake in a user's words, shared by the CLI (./progress.ts) and the dashboard (apps/web/src/wake.tsx):
// what a wake in progress is waiting for, and the receipt of a finished one. Pure, from the `wake` of
// GET /api/endpoints/{id}. It lives in the CLI's workspace because the CLI must build on its own (a
// fresh install of apps/cli has no apps/web beside it); the dashboard, built from the repository,
// imports it from here.

/** What these words read of an endpoint's `wake` (GET /api/endpoints/{id}). */
export interface Wake {
  stage: 'signal' | 'scheduled' | 'image' | 'engine' | 'ready' | 'done';
  node?: string | null;
  placement?: 'warm' | 'cold' | null;
  seconds: {
    total: number | null;
    signal: number | null;
    scheduled: number | null;
    image: number | null;
    engine: number | null;
    firstByte: number | null;
  };
}

/** What each stage of a wake in progress is waiting for, in a user's words. */
export function stageText(w: Pick<Wake, 'stage' | 'node' | 'placement'>): string {
  const on = w.node ? ` on ${w.node}` : '';
  switch (w.stage) {
    case 'signal':
      return 'Asking for a replica';
    case 'scheduled':
      return 'Waiting for a GPU node';
    case 'image':
      return `Starting the engine${on} (its image is pulled if the node lacks it)`;
    case 'engine':
      return `Loading the model${on}${w.placement === 'warm' ? ', a node that has it cached' : w.placement === 'cold' ? ', a node new to it' : ''}`;
    case 'ready':
      return 'Engine ready; sending your request';
    case 'done':
      return 'Awake';
  }
}

/** `40 ms`, `7.7 s`, `85 s`: Berth's own stages are milliseconds, a model's load tens of seconds. */
export const secs = (s: number) =>
  s < 1 ? `${Math.round(s * 1000)} ms` : s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;

/** A finished wake: `9.0 s on gpu-h100-0 (warm node)`, and each stage's duration. */
export function receiptText(w: Wake): { summary: string; stages: string } {
  const s = w.seconds;
  const where = w.node ? ` on ${w.node}${w.placement ? ` (${w.placement} node)` : ''}` : '';
  const stages: [string, number | null][] = [
    ['signal', s.signal],
    ['node', s.scheduled],
    ['image', s.image],
    ['engine', s.engine],
    ['first byte', s.firstByte],
  ];
  return {
    summary: `${s.total === null ? 'unfinished' : secs(s.total)}${where}`,
    stages: stages
      .filter((e): e is [string, number] => e[1] !== null)
      .map(([k, v]) => `${k} ${secs(v)}`)
      .join(' · '),
  };
}
