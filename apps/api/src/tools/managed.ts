// What a request with managed tools needs around the loop: its tools' MCP sessions (opened in
// parallel, credentials unsealed), and each call's charge through the prepaid wallet.
import type { Wallet } from '../billing/wallet.ts';
import type { ToolRecord } from './repository.ts';
import type { Sealer } from '../platform/sealed.ts';
import type { ChargeTool, ManagedServer } from './loop.ts';
import { openMcpSession } from './mcp.ts';

export async function openManagedServers(
  tools: readonly (ToolRecord & { allowedTools?: readonly string[] })[],
  options: {
    sealer?: Sealer | undefined;
    /** MANAGED_TOOL_MAX_RESPONSE_BYTES: each server's answers are read up to this. */
    maxResponseBytes: number;
  },
  signal: AbortSignal,
): Promise<ManagedServer[]> {
  const { sealer, maxResponseBytes } = options;
  return Promise.all(
    tools.map(async (t): Promise<ManagedServer> => {
      const base = {
        toolId: t.id,
        pricePerCall: t.pricePerCall,
        ...(t.allowedTools ? { allowedTools: t.allowedTools } : {}),
      };
      try {
        const headers =
          t.headersSealed && sealer
            ? (JSON.parse(sealer.open(t.headersSealed, `tool:${t.id}`)) as Record<string, string>)
            : {};
        const session = await openMcpSession(
          { url: t.url!, headers, timeoutMs: t.timeoutMs, maxResponseBytes },
          signal,
        );
        return { ...base, session };
      } catch (err) {
        if (signal.aborted) throw signal.reason;
        return { ...base, session: { error: err instanceof Error ? err.message : String(err) } };
      }
    }),
  );
}

export async function closeManagedServers(servers: readonly ManagedServer[]): Promise<void> {
  await Promise.all(servers.map((s) => ('error' in s.session ? undefined : s.session.close())));
}

/** Each tool call reserved at its price and recorded as usage of `tool:<id>`. */
export function walletCharger(
  wallet: Pick<Wallet, 'reserve'>,
  who: { accountId: string; keyId: string },
): ChargeTool {
  return async (toolId, price) => {
    if (price === 0n) return { settle() {}, release() {} };
    // The key's spend limit, when it has one, bounds the tool's fee too.
    const r = await wallet.reserve({ accountId: who.accountId, amount: price, keyId: who.keyId });
    if (!r.ok) return null;
    return {
      settle: () =>
        void r.hold.settle(price, {
          keyId: who.keyId,
          model: `tool:${toolId}`,
          promptTokens: 0,
          completionTokens: 0,
        }),
      release: () => r.hold.release(),
    };
  };
}
