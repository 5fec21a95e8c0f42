// The MCP client of managed tools: one session per tool per request (streamable HTTP, the official
// SDK), listing its tools once and calling them with a per-request timeout, each answer read up to
// MANAGED_TOOL_MAX_RESPONSE_BYTES (./mcp-limit.ts). Failures are values: what the model reads as the
// tool's result, never an exception the caller must turn into a 500.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { cappedFetch, TOO_LARGE_CODE, tooLargeMessage } from './mcp-limit.ts';

export interface McpToolInfo {
  name: string;
  description?: string | undefined;
  inputSchema: Record<string, unknown>;
}

export interface McpResult {
  /** The text the model reads: the tool's text content, or what went wrong. */
  text: string;
  isError: boolean;
  /** The server answered (even with isError): the call is charged. */
  answered: boolean;
}

export interface McpSession {
  readonly tools: McpToolInfo[];
  call(name: string, args: Record<string, unknown>, signal: AbortSignal): Promise<McpResult>;
  close(): Promise<void>;
}

export interface McpTarget {
  url: string;
  headers: Record<string, string>;
  timeoutMs: number;
  /** MANAGED_TOOL_MAX_RESPONSE_BYTES: each answer, and the tool list as a whole, at most this. */
  maxResponseBytes: number;
}

const CLIENT_INFO = { name: 'berth', version: '0.1.0' };

/** Connects and lists the tools; throws (with the server's reason) when either fails. */
export async function openMcpSession(target: McpTarget, signal: AbortSignal): Promise<McpSession> {
  const client = new Client(CLIENT_INFO);
  const transport = new StreamableHTTPClientTransport(new URL(target.url), {
    requestInit: { headers: target.headers },
    fetch: cappedFetch(target.maxResponseBytes),
  });
  const options = { signal, timeout: target.timeoutMs };
  try {
    await client.connect(transport, options);
    const tools: McpToolInfo[] = [];
    let cursor: string | undefined;
    // Pages are bounded one by one; their sum too (it all goes into the model's prompt).
    let listed = 0;
    do {
      const page = await client.listTools(cursor ? { cursor } : {}, options);
      listed += JSON.stringify(page.tools).length;
      if (listed > target.maxResponseBytes)
        throw new McpError(TOO_LARGE_CODE, tooLargeMessage(target.maxResponseBytes));
      for (const t of page.tools)
        tools.push({ name: t.name, description: t.description, inputSchema: t.inputSchema });
      cursor = page.nextCursor;
    } while (cursor && tools.length < 1000);
    return {
      tools,
      async call(name, args, callSignal) {
        try {
          const r = await client.callTool({ name, arguments: args }, undefined, {
            signal: callSignal,
            timeout: target.timeoutMs,
          });
          const content = (r.content ?? []) as { type: string; text?: string }[];
          const text = content
            .map((c) => (c.type === 'text' ? (c.text ?? '') : `[${c.type} content]`))
            .join('\n');
          const structured = text === '' && r.structuredContent ? JSON.stringify(r.structuredContent) : '';
          return { text: text || structured, isError: r.isError === true, answered: true };
        } catch (err) {
          if (callSignal.aborted) throw callSignal.reason;
          // Not answered (nothing charged): a failure, a timeout, or an answer past the limit.
          return { text: `Error: ${describe(err, target.timeoutMs)}`, isError: true, answered: false };
        }
      },
      async close() {
        await transport.terminateSession().catch(() => {});
        await client.close().catch(() => {});
      },
    };
  } catch (err) {
    await client.close().catch(() => {});
    if (signal.aborted) throw signal.reason;
    throw new Error(describe(err, target.timeoutMs), { cause: err });
  }
}

function describe(err: unknown, timeoutMs: number): string {
  if (err instanceof McpError && err.code === TOO_LARGE_CODE)
    return err.message.replace(/^MCP error -?\d+: /, '');
  const message = err instanceof Error ? err.message : String(err);
  if (/timed out|timeout/i.test(message)) return `the tool server did not answer within ${timeoutMs} ms`;
  return `the tool server failed: ${message}`;
}
