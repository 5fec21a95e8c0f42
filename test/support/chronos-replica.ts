// `npm start`'s API as a child process whose Chronos runs on a fast clock: Chronos's time is
// TEST_CHRONOS_T0 (epoch ms) at the real instant TEST_CHRONOS_R0 and runs TEST_CHRONOS_SPEED times
// faster than real time, so schedules that fire every minute fire every few seconds, across a
// daylight-saving change, in a real API process that a test can SIGKILL. Every replica started with
// the same three values reads the same time. Prints the listening line `spawnApi` waits for at any
// LOG_LEVEL.
import { parseConfig, startApi } from '@berth/api';

const num = (name: string) => {
  const v = Number(process.env[name]);
  if (!Number.isFinite(v)) throw new Error(`${name} must be a number`);
  return v;
};
const t0 = num('TEST_CHRONOS_T0');
const r0 = num('TEST_CHRONOS_R0');
const speed = num('TEST_CHRONOS_SPEED');

const api = await startApi(parseConfig(process.env), {
  chronosClock: {
    now: () => new Date(t0 + (Date.now() - r0) * speed),
    after(ms, fn) {
      const timer = setTimeout(fn, Math.max(0, ms / speed));
      timer.unref();
      return { cancel: () => clearTimeout(timer) };
    },
  },
});
process.stdout.write(JSON.stringify({ port: api.port, msg: 'Berth API listening' }) + '\n');
process.on('SIGTERM', () => void api.close().then(() => process.exit(0)));
