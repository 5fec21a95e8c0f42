import { pino } from 'pino';
import { ConfigError, configFromEnv } from './config.ts';
import { startOperator } from './operator.ts';

let config;
try {
  config = configFromEnv();
} catch (err) {
  console.error((err as Error).message);
  process.exit(2);
}
const log = pino({ name: 'berth-operator', level: config.logLevel });
const operator = await startOperator(config, { log }).catch((err: unknown) => {
  log.fatal({ err: err instanceof ConfigError ? err.message : err }, 'operator failed to start');
  process.exit(1);
});

let shuttingDown = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (shuttingDown) return;
    shuttingDown = true;
    log.info({ signal }, 'shutting down: stopping informers, draining the queue, releasing the lease');
    const force = setTimeout(() => process.exit(1), 30_000);
    force.unref();
    operator.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  });
}
