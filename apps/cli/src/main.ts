// berth: Berth's command-line tool (the tools, olympus and chronos commands are in their own files).
// Exit codes: 0 success; 1 the API refused or could not be reached (its message is printed); 2 usage
// errors (unknown command or option, bad manifest or request file); 3 an endpoint failed (reason and
// last log lines printed); 4 not logged in or key refused (401/403); 5 timed out waiting.
import { Command, CommanderError, Option } from 'commander';
import pkg from '../package.json' with { type: 'json' };
import { apply, ManifestError } from './apply.ts';
import { chatTarget, streamChat } from './chat.ts';
import { registerChronosCommands } from './chronos.ts';
import { registerKeyCommands } from './keys.ts';
import { ApiFailure, Client, type Endpoint, type ResponseOf } from './client.ts';
import { readConfig, resolve, writeConfig } from './config.ts';
import { registerOlympusCommands } from './olympus.ts';
import { FORMATS, money, print, when, yesNo, type Format } from './output.ts';
import { EndpointFailed, follow } from './progress.ts';
import { registerToolCommands } from './tools.ts';

const EXIT = { api: 1, usage: 2, failed: 3, auth: 4, timeout: 5 } as const;

const program = new Command('berth')
  .description('Provision and call Berth dedicated GPU endpoints')
  .version(pkg.version, '-V, --version', 'print the version of berth')
  .option('--profile <name>', 'profile from `berth login` (default: the current one; BERTH_PROFILE)')
  .addOption(new Option('-o, --output <format>', 'output format').choices(FORMATS).default('table'))
  .showHelpAfterError()
  .exitOverride();

const fmt = () => program.opts().output as Format;
function client(): Client {
  const c = resolve(program.opts().profile);
  if (!c.url || !c.key)
    throw new ApiFailure(
      401,
      `Not logged in (profile ${c.profile}): run \`berth login\`, or set BERTH_API_URL and BERTH_API_KEY`,
    );
  return new Client(c.url, c.key);
}
const id = (value: string) => ({ params: { id: value } });

const endpointColumns = {
  id: (e: Endpoint) => e.id,
  name: (e: Endpoint) => e.name,
  model: (e: Endpoint) => e.model,
  hardware: (e: Endpoint) => `${e.hardware.gpuCount}x ${e.hardware.gpuType}`,
  status: (e: Endpoint) => e.label,
  reason: (e: Endpoint) => e.reason ?? '',
};

program
  .command('login')
  .description('Store a base URL and key for a profile (file mode 0600); checks them with the API')
  .requiredOption('--url <url>', 'the Berth API, e.g. http://localhost:8080', process.env.BERTH_API_URL)
  .option('--key <key>', 'an API key (default: BERTH_API_KEY, or read from standard input)')
  .action(async (o: { url: string; key?: string }) => {
    let key = o.key ?? process.env.BERTH_API_KEY;
    if (!key && !process.stdin.isTTY) key = (await new Response(process.stdin as never).text()).trim();
    if (!key)
      throw new CommanderError(
        EXIT.usage,
        'usage',
        'error: a key is needed: --key, BERTH_API_KEY or standard input',
      );
    const who = (await new Client(o.url, key).call('get', '/api/whoami')).data;
    const config = readConfig();
    const profile = program.opts().profile ?? config.current ?? 'default';
    config.profiles[profile] = { url: o.url, key };
    config.current = profile;
    const file = writeConfig(config);
    process.stderr.write(
      `Logged in to ${o.url} as account ${who.account.id} (key ${who.key.prefix}…, scope ${who.key.scope}); profile "${profile}" saved in ${file}\n`,
    );
  });

program
  .command('whoami')
  .description('The account and key in use')
  .action(async () => {
    const c = client();
    const who = (await c.call('get', '/api/whoami')).data;
    print(fmt(), fmt() === 'table' ? { ...who, url: c.baseUrl } : who, {
      account: (w: typeof who) => w.account.id,
      key: (w: typeof who) => `${w.key.prefix}…`,
      name: (w: typeof who) => w.key.name,
      scope: (w: typeof who) => w.key.scope,
      url: () => c.baseUrl,
    });
  });

program
  .command('apply')
  .description('Create or update the DedicatedEndpoints of a manifest file (kubectl-style YAML)')
  .requiredOption('-f, --filename <file>', 'manifest file (- for standard input)')
  .option('--dry-run', 'show the plan, change nothing')
  .option('--prune', 'delete endpoints of the account that the file does not list')
  .action(async (o: { filename: string; dryRun?: boolean; prune?: boolean }) => {
    const actions = await apply(client(), o.filename, { dryRun: !!o.dryRun, prune: !!o.prune });
    if (fmt() !== 'table') print(fmt(), actions);
  });

const endpoints = program.command('endpoints').alias('ep').description('Dedicated endpoints');
endpoints
  .command('list')
  .action(async () => print(fmt(), await client().listAll('/api/endpoints'), endpointColumns));
endpoints
  .command('get <id>')
  .action(async (e: string) =>
    print(fmt(), (await client().call('get', '/api/endpoints/{id}', id(e))).data, endpointColumns),
  );
endpoints
  .command('create')
  .description('Provision an endpoint and follow it to ONLINE (--no-wait returns at once)')
  .requiredOption('--model <id>', 'model hub id, e.g. Qwen/Qwen2.5-0.5B-Instruct')
  .requiredOption('--gpu-type <id>', 'instance type id (berth hardware list)')
  .option('--gpus <n>', 'GPUs per replica', '1')
  .option('--id <endpt-…>', 'choose the id (PUT: idempotent)')
  .option('--name <name>', 'display name')
  .option('--revision <rev>', 'hub branch, tag or commit')
  .option('--max-model-len <n>', 'context length')
  .option('--public', 'no API key needed to call it')
  .option('--idle-timeout <seconds>', 'hibernate after this long without traffic')
  .option('--min-replicas <n>')
  .option('--max-replicas <n>')
  .option('--hub-token <token>', 'for a gated model (default: HF_TOKEN)')
  .option('--no-wait', 'do not follow the endpoint')
  .option('--timeout <seconds>', 'give up waiting after', '900')
  .action(async (o: Record<string, string | boolean | undefined>) => {
    const c = client();
    const num = (v: unknown) => (v === undefined ? undefined : Number(v));
    const scaling = Object.fromEntries(
      Object.entries({
        idleTimeoutSeconds: num(o.idleTimeout),
        minReplicas: num(o.minReplicas),
        maxReplicas: num(o.maxReplicas),
      }).filter(([, v]) => v !== undefined),
    );
    const hubToken = (o.hubToken as string | undefined) ?? process.env.HF_TOKEN;
    const body = {
      model: o.model as string,
      hardware: { gpuType: o.gpuType as string, gpuCount: Number(o.gpus) },
      ...(o.name ? { name: o.name as string } : {}),
      ...(o.revision ? { revision: o.revision as string } : {}),
      ...(o.maxModelLen ? { maxModelLen: Number(o.maxModelLen) } : {}),
      ...(o.public ? { authMode: 'Public' as const } : {}),
      ...(Object.keys(scaling).length ? { scaling } : {}),
      ...(hubToken ? { hubToken } : {}),
    };
    const created = o.id
      ? (await c.call('put', '/api/endpoints/{id}', { ...id(o.id as string), body })).data
      : (await c.call('post', '/api/endpoints', { body })).data;
    const done = o.wait
      ? await follow(c, created.id, { until: 'up', timeoutSeconds: Number(o.timeout) })
      : created;
    print(fmt(), done, endpointColumns);
  });
endpoints
  .command('wake <id>')
  .option('--no-wait', 'do not follow the endpoint')
  .option('--timeout <seconds>', 'give up waiting after', '600')
  .action(async (e: string, o: { wait: boolean; timeout: string }) => {
    const c = client();
    const woken = (await c.call('post', '/api/endpoints/{id}/wake', id(e))).data;
    const done = o.wait ? await follow(c, e, { until: 'up', timeoutSeconds: Number(o.timeout) }) : woken;
    print(fmt(), done, endpointColumns);
  });
endpoints
  .command('wait <id>')
  .description('Follow an endpoint until it is ONLINE (exit 3 if it fails)')
  .option('--timeout <seconds>', 'give up after', '900')
  .action(async (e: string, o: { timeout: string }) => {
    print(
      fmt(),
      await follow(client(), e, { until: 'up', timeoutSeconds: Number(o.timeout) }),
      endpointColumns,
    );
  });
endpoints
  .command('delete <id>')
  .description('Terminate an endpoint')
  .action(async (e: string) => {
    const r = (await client().call('delete', '/api/endpoints/{id}', id(e))).data;
    if (fmt() === 'table') process.stdout.write(`${e} deleted\n`);
    else print(fmt(), r);
  });
endpoints
  .command('logs <id>')
  .option('-f, --follow', 'keep streaming')
  .action(async (e: string, o: { follow?: boolean }) => {
    const res = await client().raw(
      'get',
      `/api/endpoints/${encodeURIComponent(e)}/logs${o.follow ? '?follow=true' : ''}`,
    );
    for await (const chunk of res.body!) process.stdout.write(chunk);
  });

/** An instance type; `pricePerGpuHour` and `currency` are absent from APIs older than the CLI. */
type Hardware = ResponseOf<'get', '/api/hardware'>['data'][number] & {
  pricePerGpuHour?: string;
  currency?: string;
};
program
  .command('hardware')
  .description('Instance types')
  .command('list')
  .description('Instance types: the id `--gpu-type` takes, GPU memory, GPU counts, price per GPU-hour')
  .action(async () => {
    const { data } = (await client().call('get', '/api/hardware')).data as { data: Hardware[] };
    print(fmt(), data, {
      id: (h: Hardware) => h.id,
      gpu: (h: Hardware) => h.displayName ?? h.gpuType,
      gib: (h: Hardware) => h.gpuMemoryGiB,
      counts: (h: Hardware) => String(h.allowedGpuCounts),
      'price/gpu-hour': (h: Hardware) => (h.pricePerGpuHour ? money(h.pricePerGpuHour, h.currency) : ''),
      available: (h: Hardware) => yesNo(h.available),
    });
  });
program
  .command('models')
  .description('Catalog models')
  .command('list')
  .action(async () =>
    print(fmt(), (await client().call('get', '/api/models')).data.data, { id: (m: { id: string }) => m.id }),
  );

program
  .command('chat')
  .description(
    'Stream a chat completion from a dedicated endpoint (endpt-…) or a catalog model (berth models list); needs an inference or global key',
  )
  .usage('<endpoint-id|model> <prompt>  |  --model <model> <prompt>')
  .argument('<target>', 'an endpoint id (endpt-…) or a catalog model; with --model, the prompt')
  .argument('[prompt]', 'the user message')
  .option('-m, --model <model>', 'a catalog model, or auto to let Olympus choose')
  .option('--max-tokens <n>', 'maximum tokens', '256')
  .action(async (first: string, second: string | undefined, o: { model?: string; maxTokens: string }) => {
    const usage = (message: string) => new CommanderError(EXIT.usage, 'usage', `error: ${message}`);
    if (o.model !== undefined && second !== undefined)
      throw usage('with --model, give only the prompt: berth chat --model <model> <prompt>');
    if (o.model === undefined && second === undefined)
      throw usage('a prompt is needed: berth chat <endpoint-id|model> <prompt>');
    const target = o.model !== undefined ? chatTarget({ model: o.model }) : chatTarget({ endpoint: first });
    await streamChat(client(), target, second ?? first, Number(o.maxTokens));
  });

const billing = program.command('billing').description('Balance and invoices (a global key is needed)');
type Balance = ResponseOf<'get', '/api/billing/balance'>;
billing
  .command('balance')
  .description('Prepaid balance, whether the account was ever credited, free Elastic queries left')
  .action(async () =>
    print(fmt(), (await client().call('get', '/api/billing/balance')).data, {
      balance: (b: Balance) => money(b.balance, b.currency),
      paid: (b: Balance) => yesNo(b.paid),
      'free queries': (b: Balance) => b.freeQueriesRemaining,
    }),
  );
type Invoices = ResponseOf<'get', '/api/billing/invoices'>;
type InvoiceRow = Omit<Invoices['data'][number], 'id' | 'issuedAt' | 'status'> & {
  id: string;
  status: string;
  issuedAt: string | null;
};
billing
  .command('invoices')
  .description('Weekly invoices of dedicated GPU time, the running week first (-o yaml shows its lines)')
  .action(async () => {
    const invoices = (await client().call('get', '/api/billing/invoices')).data;
    if (fmt() !== 'table') return print(fmt(), invoices);
    const rows: InvoiceRow[] = [{ ...invoices.upcoming, id: '', issuedAt: null }, ...invoices.data];
    print(fmt(), rows, {
      id: (i: InvoiceRow) => i.id,
      status: (i: InvoiceRow) => i.status,
      period: (i: InvoiceRow) => `${i.periodStart.slice(0, 10)} – ${i.periodEnd.slice(0, 10)}`,
      total: (i: InvoiceRow) => money(i.total, i.currency),
      issued: (i: InvoiceRow) => when(i.issuedAt),
    });
  });

const context = { client, format: fmt };
registerKeyCommands(program, context);
registerToolCommands(program, context);
registerOlympusCommands(program, context);
registerChronosCommands(program, context);

program
  .command('completion <shell>')
  .description('Print a completion script: bash or zsh (eval "$(berth completion bash)")')
  .action((shell: string) => {
    const words = (cmd: Command): string => cmd.commands.map((c) => c.name()).join(' ');
    const subs = program.commands
      .filter((c) => c.commands.length)
      .map((c) => `    ${c.name()}) COMPREPLY=( $(compgen -W "${words(c)}" -- "$cur") ); return;;`)
      .join('\n');
    const script = `_berth() {
  local cur=\${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then COMPREPLY=( $(compgen -W "${words(program)}" -- "$cur") ); return; fi
  case "\${COMP_WORDS[1]}" in
${subs}
  esac
  COMPREPLY=( $(compgen -f -- "$cur") )
}
complete -F _berth berth
`;
    if (shell === 'bash') process.stdout.write(script);
    else if (shell === 'zsh') process.stdout.write(`autoload -Uz bashcompinit && bashcompinit\n${script}`);
    else throw new CommanderError(EXIT.usage, 'usage', `error: unknown shell ${shell}: bash or zsh`);
  });

try {
  await program.parseAsync();
} catch (err) {
  if (err instanceof CommanderError) {
    if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.exitCode === 0)
      process.exit(0);
    if (err.code === 'usage') process.stderr.write(`${err.message}\n`);
    process.exit(EXIT.usage);
  }
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`error: ${message}\n`);
  if (err instanceof ManifestError) process.exit(EXIT.usage);
  if (err instanceof EndpointFailed) process.exit(EXIT.failed);
  if (err instanceof ApiFailure)
    process.exit(err.status === 401 || err.status === 403 ? EXIT.auth : EXIT.api);
  if (message.startsWith('Timed out')) process.exit(EXIT.timeout);
  process.exit(EXIT.api);
}
