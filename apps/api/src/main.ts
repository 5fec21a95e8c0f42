// `npm start`: read the configuration from the environment, start the API, stop on SIGTERM/SIGINT.
import './node-version.mjs';
import { ConfigError, parseConfig } from './config.ts';
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

const api = await startApi(config).catch((err: unknown) => {
  // Configuration only checkable at start-up (e.g. BERTH_LOCAL_ENGINE=vllm without vllm on PATH).
  if (err instanceof ConfigError) {
    console.error(err.message);
    process.exit(78);
  }
  throw err;
});
let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    api.logger.info({ signal }, 'shutting down');
    api.close().then(
      () => process.exit(0),
      (err: unknown) => {
        api.logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  });
}
