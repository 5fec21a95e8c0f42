// `npm start`: read the configuration from the environment, start the API, stop on SIGTERM/SIGINT.
import './node-version.mjs';
import { ConfigError, parseConfig } from './platform/config.ts';
import { databaseStartupProblem } from './platform/db-unavailable.ts';
import { startApi } from './server.ts';

let config;
try {
  config = parseConfig(process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(err.message);
    process.exit(78); // EX_CONFIG
  }
  throw err;
}

// Handlers go in before start-up: a SIGTERM that arrives while the API starts (a pod deleted at
// once, a test stopping what it just started) waits for the start to finish, then shuts down
// cleanly (exit 0) instead of Node's default of dying by the signal.
const started: { api?: Awaited<ReturnType<typeof startApi>> } = {};
let stopping = false;
const stop = (signal: string) => {
  const running = started.api;
  if (!running || stopping) return;
  stopping = true;
  running.logger.info({ signal }, 'shutting down');
  running.close().then(
    () => process.exit(0),
    (err: unknown) => {
      running.logger.error({ err }, 'shutdown failed');
      process.exit(1);
    },
  );
};
let pending: string | undefined;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (started.api) stop(signal);
    else pending ??= signal;
  });
}

started.api = await startApi(config).catch((err: unknown) => {
  // Configuration only checkable at start-up (e.g. BERTH_LOCAL_ENGINE=vllm without vllm on PATH,
  // a DATABASE_URL whose server is down or whose database does not exist).
  const problem =
    err instanceof ConfigError
      ? err.message
      : config.DATABASE_URL && databaseStartupProblem(err, config.DATABASE_URL);
  if (problem) {
    console.error(problem);
    process.exit(78);
  }
  throw err;
});
if (pending) stop(pending);
