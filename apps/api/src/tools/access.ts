// The one rule for "may this caller use tool X": the tool exists, the caller's account has it
// enabled (POST /api/tools), and the key's tool pin is empty or names it (spec §5.7). Managed tool
// loops, Olympus and Chronos all ask here.
import { ApiError } from '../platform/errors.ts';
import type { ToolRecord, ToolRepository } from './repository.ts';

export type ToolDenial = { toolId: string; reason: 'unknown' | 'not_enabled' | 'not_in_pin' };

export type ToolAccess = { ok: true; tools: ToolRecord[] } | { ok: false; denial: ToolDenial };

export interface ToolCaller {
  accountId: string;
  /** The key's tool pin; empty allows every tool the account has enabled. */
  toolPin: readonly string[];
}

/** One database query for any number of tools; the first tool refused, in the order asked, wins. */
export async function toolAccess(
  repo: Pick<ToolRepository, 'lookup'>,
  caller: ToolCaller,
  toolIds: readonly string[],
): Promise<ToolAccess> {
  const ids = [...new Set(toolIds)];
  const found = await repo.lookup(caller.accountId, ids);
  const tools: ToolRecord[] = [];
  for (const toolId of ids) {
    const entry = found.get(toolId);
    if (!entry) return { ok: false, denial: { toolId, reason: 'unknown' } };
    if (caller.toolPin.length > 0 && !caller.toolPin.includes(toolId))
      return { ok: false, denial: { toolId, reason: 'not_in_pin' } };
    if (!entry.enabled) return { ok: false, denial: { toolId, reason: 'not_enabled' } };
    tools.push(entry.tool);
  }
  return { ok: true, tools };
}

/** What the caller reads when a tool is refused (403 naming the tool; 400 for an unknown one). */
export function denialMessage(d: ToolDenial): string {
  switch (d.reason) {
    case 'unknown':
      return `Unknown tool "${d.toolId}" (GET /api/tools lists the catalog)`;
    case 'not_in_pin':
      return `Tool "${d.toolId}" is not allowed by this API key's tool pin`;
    case 'not_enabled':
      return `Tool "${d.toolId}" is not enabled for this account; enable it with POST /api/tools {"tool_id": "${d.toolId}"}`;
  }
}

/** toolAccess() as a guard: the tools, or the ApiError the caller sees. */
export async function requireTools(
  repo: Pick<ToolRepository, 'lookup'>,
  caller: ToolCaller,
  toolIds: readonly string[],
): Promise<ToolRecord[]> {
  const r = await toolAccess(repo, caller, toolIds);
  if (r.ok) return r.tools;
  throw new ApiError(r.denial.reason === 'unknown' ? 'unknown_tool' : 'tool_not_allowed', {
    message: denialMessage(r.denial),
    param: 'tools',
  });
}
