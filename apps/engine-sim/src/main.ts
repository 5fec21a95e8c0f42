// CLI: `engine-sim [serve] <model> [--port 8000] [...vllm flags]`, exiting as vLLM would.

import { ModelFlagError, parseArgs, UsageError } from './args.ts';
import { ConfigError, usage } from './config.ts';
import { serve, StartupError } from './server.ts';
import { vllmLogLine } from './errors.ts';

const out = (line: string) => process.stdout.write(line);

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs(process.argv.slice(2), process.env);
  } catch (err) {
    if (err instanceof UsageError) {
      // as vLLM's argparse: the usage line, `<prog>: error: <message>`, exit status 2
      process.stderr.write(err.stderr);
      process.exit(2);
    }
    if (err instanceof ModelFlagError) {
      process.stderr.write(err.stderr);
      process.exit(1);
    }
    if (err instanceof ConfigError) {
      process.stderr.write(`engine-sim: error: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  if (parsed.help) {
    out(usage());
    return;
  }
  const { options, ignored } = parsed;
  if (ignored.length > 0)
    out(vllmLogLine('WARNING', 'engine-sim', `ignoring vLLM arguments: ${ignored.join(' ')}`));

  const sim = await serve(options, { log: out });

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    out(vllmLogLine('INFO', 'launcher.py:80', `Received ${signal}; draining in-flight requests.`));
    void sim.close().then(() => {
      out('INFO:     Shutting down\nINFO:     Application shutdown complete.\n');
      process.exit(0);
    });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));

  try {
    await sim.ready;
  } catch (err) {
    if (err instanceof StartupError) {
      process.stderr.write(err.stderr);
      process.exit(1);
    }
    throw err;
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
