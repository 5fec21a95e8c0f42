// berth tools: the tool catalog with what the account has enabled (/api/tools): managed MCP tools and
// the `olympus` and `chronos` feature switches. Enabling and disabling need a global key.
import type { Command } from 'commander';
import type { ResponseOf } from './client.ts';
import type { Context } from './context.ts';
import { money, print, yesNo } from './output.ts';

type Tool = ResponseOf<'get', '/api/tools'>['data'][number];

const toolColumns = {
  tool: (t: Tool) => t.tool_id,
  kind: (t: Tool) => t.kind,
  'price/call': (t: Tool) => money(t.price_per_call),
  enabled: (t: Tool) => yesNo(t.enabled),
  description: (t: Tool) => t.description,
};

export function registerToolCommands(program: Command, ctx: Context): void {
  const tools = program.command('tools').description('Managed tools and the olympus and chronos features');
  tools
    .command('list')
    .description('The tool catalog, with ENABLED for your account')
    .action(async () =>
      print(ctx.format(), (await ctx.client().call('get', '/api/tools')).data.data, toolColumns),
    );
  tools
    .command('enable <tool>')
    .description('Enable a tool (or olympus, chronos) for the account (a global key is needed)')
    .action(async (id: string) => {
      const t = (await ctx.client().call('post', '/api/tools', { body: { tool_id: id } })).data;
      if (ctx.format() === 'table') process.stdout.write(`tool ${t.tool_id} enabled\n`);
      else print(ctx.format(), t);
    });
  tools
    .command('disable <tool>')
    .description('Disable a tool for the account (a global key is needed)')
    .action(async (id: string) => {
      const t = (await ctx.client().call('delete', '/api/tools/{tool_id}', { params: { tool_id: id } })).data;
      if (ctx.format() === 'table') process.stdout.write(`tool ${t.tool_id} disabled\n`);
      else print(ctx.format(), t);
    });
}
