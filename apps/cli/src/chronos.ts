// berth chronos: scheduled runs (/api/chronos/runs) — list, create from a YAML or JSON file, run now,
// execution history, delete. Chronos must be enabled for the account (berth tools enable chronos).
import type { Command } from 'commander';
import type { RequestOf, ResponseOf } from './client.ts';
import type { Context } from './context.ts';
import { readDocument } from './input.ts';
import { money, print, when } from './output.ts';

type Run = ResponseOf<'get', '/api/chronos/runs/{id}'>;
type Execution = ResponseOf<'post', '/api/chronos/runs/{id}/trigger'>;

const runColumns = {
  id: (r: Run) => r.id,
  name: (r: Run) => r.name,
  schedule: (r: Run) => r.schedule,
  timezone: (r: Run) => r.timezone,
  steps: (r: Run) => r.steps.length,
  'next fire': (r: Run) => when(r.next_fire_at) || 'never',
};

const executionColumns = {
  id: (e: Execution) => e.id,
  run: (e: Execution) => e.run_id,
  trigger: (e: Execution) => e.trigger,
  status: (e: Execution) => e.status,
  steps: (e: Execution) => e.steps.map((s) => `${s.type}:${s.status}`).join(','),
  cost: (e: Execution) => money(e.cost),
  created: (e: Execution) => when(e.created_at),
  reason: (e: Execution) => e.reason ?? '',
};

const id = (value: string) => ({ params: { id: value } });

export function registerChronosCommands(program: Command, ctx: Context): void {
  const chronos = program.command('chronos').description('Chronos: scheduled runs of chat and tool steps');
  chronos
    .command('list')
    .description('The account’s runs, oldest first (every page)')
    .action(async () => print(ctx.format(), await ctx.client().listAll('/api/chronos/runs'), runColumns));
  chronos
    .command('get <id>')
    .action(async (run: string) =>
      print(
        ctx.format(),
        (await ctx.client().call('get', '/api/chronos/runs/{id}', id(run))).data,
        runColumns,
      ),
    );
  chronos
    .command('create')
    .description('Create a run from a YAML or JSON file: name, schedule, timezone, steps')
    .requiredOption('-f, --filename <file>', 'the run (- for standard input)')
    .action(async (o: { filename: string }) => {
      const body = readDocument(o.filename) as RequestOf<'post', '/api/chronos/runs'>;
      print(ctx.format(), (await ctx.client().call('post', '/api/chronos/runs', { body })).data, runColumns);
    });
  chronos
    .command('trigger <id>')
    .description('Run now (queued at once; the schedule is unchanged)')
    .action(async (run: string) =>
      print(
        ctx.format(),
        (await ctx.client().call('post', '/api/chronos/runs/{id}/trigger', id(run))).data,
        executionColumns,
      ),
    );
  chronos
    .command('executions <id>')
    .description('Execution history of a run, newest first (-o yaml shows each step’s output)')
    .option('--limit <n>', 'how many (1–100)', '20')
    .action(async (run: string, o: { limit: string }) =>
      print(
        ctx.format(),
        (
          await ctx
            .client()
            .call('get', '/api/chronos/runs/{id}/executions', { ...id(run), query: { limit: o.limit } })
        ).data.data,
        executionColumns,
      ),
    );
  chronos
    .command('delete <id>')
    .description('Delete a run and its history')
    .action(async (run: string) => {
      const r = (await ctx.client().call('delete', '/api/chronos/runs/{id}', id(run))).data;
      if (ctx.format() === 'table') process.stdout.write(`${r.id} deleted\n`);
      else print(ctx.format(), r);
    });
}
