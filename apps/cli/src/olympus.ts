// berth olympus: the account's Olympus routing policy (/api/olympus/policy) and its dry run
// (/api/olympus/route): which catalog model Olympus would choose for a prompt now, and why — nothing
// is called or charged. Olympus must be enabled (berth tools enable olympus).
import { Option, type Command } from 'commander';
import type { RequestOf, ResponseOf } from './client.ts';
import type { Context } from './context.ts';
import { readDocument } from './input.ts';
import { print, when } from './output.ts';

type Policy = ResponseOf<'get', '/api/olympus/policy'>;
type Choice = ResponseOf<'post', '/api/olympus/route'>;
type RouteEndpoint = 'chat/completions' | 'completions' | 'responses';

const policyColumns = {
  objective: (p: Policy) => p.objective,
  'allowed models': (p: Policy) => p.allowed_models.join(',') || '(all)',
  routes: (p: Policy) => p.routes.map((r) => `${r.name}→${r.model}`).join(',') || '(none)',
  threshold: (p: Policy) => p.route_threshold,
  'embedding model': (p: Policy) => p.embedding_model ?? '(cheapest)',
  updated: (p: Policy) => when(p.updated_at) || '(never set)',
};

const choiceColumns = {
  model: (c: Choice) => c.model,
  reason: (c: Choice) => c.reason,
  objective: (c: Choice) => c.objective,
  considered: (c: Choice) => c.considered.join(','),
  routing: (c: Choice) => {
    if (!c.routing) return '';
    const n = c.routing.nearest;
    return n ? `${c.routing.outcome} (nearest ${n.name}: ${n.similarity.toFixed(2)})` : c.routing.outcome;
  },
};

/** The body the Elastic route would get: the prompt where that route reads it. */
function routeBody(
  endpoint: RouteEndpoint,
  prompt: string,
  maxTokens?: number,
): RequestOf<'post', '/api/olympus/route'> {
  const input =
    endpoint === 'completions'
      ? { prompt }
      : endpoint === 'responses'
        ? { input: prompt }
        : { messages: [{ role: 'user' as const, content: prompt }] };
  const limit = endpoint === 'responses' ? 'max_output_tokens' : 'max_tokens';
  return { endpoint, ...input, ...(maxTokens !== undefined ? { [limit]: maxTokens } : {}) };
}

export function registerOlympusCommands(program: Command, ctx: Context): void {
  const olympus = program
    .command('olympus')
    .description('Olympus: its routing policy and a dry run of its choice');
  olympus
    .command('policy')
    .description('Show the routing policy (defaults when never set)')
    .action(async () =>
      print(ctx.format(), (await ctx.client().call('get', '/api/olympus/policy')).data, policyColumns),
    );
  olympus
    .command('set-policy')
    .description('Replace the routing policy with a YAML or JSON file (a global key is needed)')
    .requiredOption(
      '-f, --filename <file>',
      'the policy: allowed_models, objective, routes, … (- for standard input)',
    )
    .action(async (o: { filename: string }) => {
      const body = readDocument(o.filename) as RequestOf<'put', '/api/olympus/policy'>;
      print(
        ctx.format(),
        (await ctx.client().call('put', '/api/olympus/policy', { body })).data,
        policyColumns,
      );
    });
  olympus
    .command('route <prompt>')
    .description('Which catalog model Olympus would choose for this prompt now, and why (nothing is called)')
    .addOption(
      new Option('--endpoint <route>', 'the Elastic route the request would go to')
        .choices(['chat/completions', 'completions', 'responses'])
        .default('chat/completions'),
    )
    .option('--max-tokens <n>', 'the request’s token limit (models that cannot give it are left out)')
    .action(async (prompt: string, o: { endpoint: RouteEndpoint; maxTokens?: string }) => {
      const body = routeBody(o.endpoint, prompt, o.maxTokens === undefined ? undefined : Number(o.maxTokens));
      print(
        ctx.format(),
        (await ctx.client().call('post', '/api/olympus/route', { body })).data,
        choiceColumns,
      );
    });
}
