// `npm start`'s API as a child process whose billing clock the test moves (over IPC), so GPU time
// can be metered across hours and week boundaries in seconds — and the process SIGKILLed. Messages:
// `{ frozen: ms }` stops the clock at an instant; `{ offset: ms }` lets it run, shifted; `{ send: job }`
// sends a job to the API's own queue (the weekly invoices) and answers `{ sent: job }`.
import { parseConfig, startApi } from '@berth/api';

const env = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
let frozen = env('TEST_CLOCK_FROZEN');
let offset = env('TEST_CLOCK_OFFSET') ?? 0;
const now = () => new Date(frozen ?? Date.now() + offset);

const api = await startApi(parseConfig(process.env), { now });
process.on('message', (m: { frozen?: number; offset?: number; send?: string }) => {
  if (m.frozen !== undefined) frozen = m.frozen;
  if (m.offset !== undefined) {
    frozen = undefined;
    offset = m.offset;
  }
  if (m.send) void api.billing.jobs.send(m.send).then(() => process.send?.({ sent: m.send }));
  else process.send?.({ clock: now().getTime() });
});
process.on('SIGTERM', () => void api.close().then(() => process.exit(0)));
