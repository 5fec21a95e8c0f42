// berth keys: create, list, show, change (expiry, spend limit, pins, dearer fallbacks), rotate with a
// grace period, revoke. A key's value is printed once, on standard output (a rotation prints the new
// key's); everything else a person reads goes to standard error or the table.
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { ResponseOf } from './client.ts';
import type { Context } from './context.ts';
import { money, print, when, yesNo } from './output.ts';

type Key = ResponseOf<'get', '/api/keys/{id}'>;
type Period = 'day' | 'week' | 'month';

/** `10.00/day` → {amount, period}; `none` (no limit) as it is. */
export function parseSpendLimit(value: string): { amount: string; period: Period } | 'none' {
  if (value === 'none') return 'none';
  const m = /^(\d+(?:\.\d{1,6})?)\/(day|week|month)$/.exec(value.trim());
  if (!m)
    throw new InvalidArgumentError('expected AMOUNT/PERIOD, e.g. 10.00/day (day, week or month), or none');
  return { amount: m[1]!, period: m[2] as Period };
}

/** `24h`, `30m`, `7d`, `0` or a number of seconds → seconds. */
export function parseDuration(value: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(value.trim());
  if (!m) throw new InvalidArgumentError('expected a duration such as 30m, 24h, 7d, or seconds');
  return Number(m[1]) * { '': 1, s: 1, m: 60, h: 3_600, d: 86_400 }[m[2] as '' | 's' | 'm' | 'h' | 'd'];
}

/** An ISO 8601 time, `never` (kept as it is: commander does not keep a parser's null), or a duration from now (`90d`). */
export function parseExpiry(value: string): string {
  if (value === 'never') return 'never';
  if (/^\d+[smhd]$/.test(value)) return new Date(Date.now() + parseDuration(value) * 1000).toISOString();
  const t = Date.parse(value);
  if (Number.isNaN(t))
    throw new InvalidArgumentError('expected an ISO 8601 time, a duration such as 90d, or never');
  return new Date(t).toISOString();
}

/** `--tool-pin a,b --tool-pin c`: every id, in order. */
const toolIds = (value: string, previous: string[]) => [
  ...previous,
  ...value
    .split(',')
    .map((t) => t.trim())
    .filter(Boolean),
];

const limit = (k: Key) =>
  k.spendLimit ? `${money(k.spendLimit.spent)} of ${money(k.spendLimit.amount)}/${k.spendLimit.period}` : '';

const keyColumns = {
  id: (k: Key) => k.id,
  name: (k: Key) => k.name,
  prefix: (k: Key) => k.prefix,
  scope: (k: Key) => k.scope,
  state: (k: Key) => k.state,
  expires: (k: Key) => when(k.replacedBy ? k.graceExpiresAt : k.expiresAt),
  'spend limit': limit,
  model: (k: Key) => k.pinnedModel ?? '',
  tools: (k: Key) => k.toolPin.join(','),
};

/** Options that set a key's settings, shared by `create` and `update`. */
function settingsOptions(c: Command): Command {
  return c
    .option('--pinned-model <model>', 'an inference key only: the model /api/b/chat/completions always calls')
    .option('--tool-pin <ids>', 'the only tools the key may use (comma-separated or repeated)', toolIds, [])
    .option(
      '--expires <when>',
      'refuse the key from then on: an ISO 8601 time, a duration (90d), or never',
      parseExpiry,
    )
    .option(
      '--spend-limit <limit>',
      'at most AMOUNT per day|week|month, e.g. 10.00/day (none: no limit)',
      parseSpendLimit,
    )
    .addOption(
      new Option(
        '--allow-dearer-fallback [yes|no]',
        'fallbacks may go to catalog models priced above the one asked for',
      )
        .choices(['yes', 'no'])
        .preset('yes'),
    );
}

interface SettingsFlags {
  pinnedModel?: string;
  toolPin: string[];
  expires?: string;
  spendLimit?: { amount: string; period: Period } | 'none';
  allowDearerFallback?: 'yes' | 'no';
  name?: string;
}

function settingsBody(o: SettingsFlags) {
  return {
    ...(o.pinnedModel !== undefined ? { pinnedModel: o.pinnedModel === 'none' ? null : o.pinnedModel } : {}),
    ...(o.toolPin.length ? { toolPin: o.toolPin } : {}),
    ...(o.expires !== undefined ? { expiresAt: o.expires === 'never' ? null : o.expires } : {}),
    ...(o.spendLimit !== undefined ? { spendLimit: o.spendLimit === 'none' ? null : o.spendLimit } : {}),
    ...(o.allowDearerFallback !== undefined ? { allowDearerFallback: o.allowDearerFallback === 'yes' } : {}),
  };
}

export function registerKeyCommands(program: Command, ctx: Context): void {
  const keys = program.command('keys').description('API keys (a global key is needed)');
  const id = (value: string) => ({ params: { id: value } });

  settingsOptions(
    keys
      .command('create <name>')
      .description('Create a key; its value is printed once, on standard output')
      .addOption(
        new Option('--scope <scope>').choices(['inference', 'compute', 'global']).default('inference'),
      ),
  ).action(async (name: string, o: SettingsFlags & { scope: 'inference' | 'compute' | 'global' }) => {
    const body = { name, scope: o.scope, ...settingsBody(o) };
    const k = (await ctx.client().call('post', '/api/keys', { body })).data;
    if (ctx.format() !== 'table') return print(ctx.format(), k);
    process.stdout.write(`${k.value}\n`);
    const notes = [
      k.scope,
      ...(k.pinnedModel ? [`model ${k.pinnedModel}`] : []),
      ...(k.toolPin.length ? [`tools ${k.toolPin.join(',')}`] : []),
      ...(k.expiresAt ? [`expires ${when(k.expiresAt)}`] : []),
      ...(k.spendLimit ? [`spend limit ${money(k.spendLimit.amount)}/${k.spendLimit.period}`] : []),
      ...(k.allowDearerFallback ? ['dearer fallbacks allowed'] : []),
    ];
    process.stderr.write(`key ${k.id} (${notes.join('; ')}) created; its value is shown once\n`);
  });

  keys
    .command('list')
    .description('Your keys: state, expiry (or end of the grace period), spend this period against the limit')
    .action(async () => print(ctx.format(), await ctx.client().listAll('/api/keys'), keyColumns));

  keys
    .command('show <id>')
    .description('One key, with its spend limit, rotation and expiry')
    .action(async (k: string) => {
      const key = (await ctx.client().call('get', '/api/keys/{id}', id(k))).data;
      if (ctx.format() !== 'table') return print(ctx.format(), key);
      print(ctx.format(), key, {
        ...keyColumns,
        resets: (x: Key) => when(x.spendLimit?.resetsAt),
        'dearer fallback': (x: Key) => yesNo(x.allowDearerFallback),
        'replaced by': (x: Key) => x.replacedBy ?? '',
        'rotated from': (x: Key) => x.rotatedFrom ?? '',
      });
    });

  settingsOptions(
    keys
      .command('update <id>')
      .description(
        'Change a key: --spend-limit 10.00/day|none, --expires 90d|never, --pinned-model m|none, …',
      )
      .option('--name <name>', 'rename the key'),
  ).action(async (k: string, o: SettingsFlags) => {
    const body = { ...(o.name !== undefined ? { name: o.name } : {}), ...settingsBody(o) };
    const key = (await ctx.client().call('patch', '/api/keys/{id}', { ...id(k), body })).data;
    print(ctx.format(), key, keyColumns);
  });

  keys
    .command('rotate <id>')
    .description(
      'Replace a key by a new one (printed once, on standard output); the old one works for the grace period',
    )
    .option(
      '--grace <duration>',
      'how long the old key keeps working: 30m, 24h (default), 7d (at most 30d), 0',
      parseDuration,
    )
    .option(
      '--expires <when>',
      "the new key's expiry (default: the old key's lifetime from now)",
      parseExpiry,
    )
    .action(async (k: string, o: { grace?: number; expires?: string }) => {
      const body = {
        ...(o.grace !== undefined ? { gracePeriodSeconds: o.grace } : {}),
        ...(o.expires !== undefined ? { expiresAt: o.expires === 'never' ? null : o.expires } : {}),
      };
      const r = (await ctx.client().call('post', '/api/keys/{id}/rotate', { ...id(k), body })).data;
      if (ctx.format() !== 'table') return print(ctx.format(), r);
      process.stdout.write(`${r.value}\n`);
      process.stderr.write(
        `key ${r.id} replaces ${r.previous.id}, which keeps working until ${r.previous.graceExpiresAt}; the new value is shown once\n`,
      );
    });

  keys
    .command('revoke <id>')
    .description('Revoke a key at once, on every API replica (calls in flight with it end)')
    .action(async (k: string) =>
      print(ctx.format(), (await ctx.client().call('delete', '/api/keys/{id}', id(k))).data, {
        id: (x: { id: string }) => x.id,
        state: (x: { state: string }) => x.state,
      }),
    );
}
