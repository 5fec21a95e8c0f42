// A small real MCP server (the official SDK's server, streamable HTTP, stateless) for managed-tool
// tests and benchmarks: `add`, `weather`, `slow` (sleeps), `fail` (the tool reports an error).
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

export interface TestMcpServer {
  url: string;
  /** tools/call requests received, in order. */
  calls: { name: string; args: unknown; authorization: string | undefined }[];
  /** Every request's Authorization header (initialize and tools/list included). */
  authorizations: (string | undefined)[];
  close(): Promise<void>;
}

export async function startMcpServer(
  options: { requireAuthorization?: string } = {},
): Promise<TestMcpServer> {
  const calls: TestMcpServer['calls'] = [];
  const authorizations: TestMcpServer['authorizations'] = [];
  const build = (req: IncomingMessage) => {
    const authorization = req.headers.authorization;
    const server = new McpServer({ name: 'berth-test-tools', version: '1.0.0' });
    const seen = (name: string, args: unknown) => calls.push({ name, args, authorization });
    server.registerTool(
      'add',
      { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } },
      async ({ a, b }) => {
        seen('add', { a, b });
        return { content: [{ type: 'text', text: String(a + b) }] };
      },
    );
    server.registerTool(
      'weather',
      { description: 'Weather in a city', inputSchema: { city: z.string() } },
      async ({ city }) => {
        seen('weather', { city });
        return { content: [{ type: 'text', text: `Sunny, 21 C in ${city}` }] };
      },
    );
    server.registerTool(
      'slow',
      { description: 'Answers after ms milliseconds', inputSchema: { ms: z.number() } },
      async ({ ms }) => {
        seen('slow', { ms });
        await new Promise((r) => setTimeout(r, ms));
        return { content: [{ type: 'text', text: `slept ${ms} ms` }] };
      },
    );
    server.registerTool('fail', { description: 'Always fails', inputSchema: {} }, async () => {
      seen('fail', {});
      throw new Error('the fail tool failed on purpose');
    });
    return server;
  };
  const http = createServer((req, res) => {
    authorizations.push(req.headers.authorization);
    if (options.requireAuthorization && req.headers.authorization !== options.requireAuthorization) {
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}');
      return;
    }
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const server = build(req);
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
        res.on('close', () => {
          void transport.close();
          void server.close();
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, JSON.parse(Buffer.concat(chunks).toString('utf8')));
      })().catch(() => {
        if (!res.headersSent) res.writeHead(500).end();
      });
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    authorizations,
    close: () =>
      new Promise((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
}
