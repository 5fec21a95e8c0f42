// A small real MCP server (the official SDK's server, streamable HTTP, stateless) for managed-tool
// tests and benchmarks: `add`, `weather`, `slow` (sleeps), `fail` (the tool reports an error), and for
// hostile cases `huge` (a text result of `bytes` bytes), `flood` (ignores MCP: answers a JSON body of
// `bytes` bytes, chunked, without Content-Length, as fast as it is read) and, with `listPadding`, a
// tools/list that large. `json`: answers as JSON bodies instead of event streams.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
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
  /** Bytes of the answer `flood` managed to write before its reader stopped (per call). */
  flooded: number[];
  close(): Promise<void>;
}

export async function startMcpServer(
  options: { requireAuthorization?: string; json?: boolean; listPadding?: number } = {},
): Promise<TestMcpServer> {
  const flooded: number[] = [];
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
    server.registerTool(
      'huge',
      { description: 'Answers a text of that many bytes', inputSchema: { bytes: z.number() } },
      async ({ bytes }) => {
        seen('huge', { bytes });
        return { content: [{ type: 'text', text: 'x'.repeat(bytes) }] };
      },
    );
    // Listed like any tool; its calls are answered before they reach this server (see flood()).
    server.registerTool(
      'flood',
      { description: 'Answers bytes bytes', inputSchema: { bytes: z.number() } },
      async () => ({ content: [{ type: 'text', text: 'unreachable' }] }),
    );
    if (options.listPadding)
      server.registerTool(
        'padded',
        { description: 'p'.repeat(options.listPadding), inputSchema: {} },
        async () => ({ content: [{ type: 'text', text: 'padded' }] }),
      );
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
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        method?: string;
        params?: { name?: string; arguments?: { bytes?: number } };
      };
      if (body.method === 'tools/call' && body.params?.name === 'flood') {
        calls.push({ name: 'flood', args: body.params.arguments, authorization: req.headers.authorization });
        void flood(res, body.params.arguments?.bytes ?? 0).then((n) => flooded.push(n));
        return;
      }
      void (async () => {
        const server = build(req);
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          ...(options.json ? { enableJsonResponse: true } : {}),
        });
        res.on('close', () => {
          void transport.close();
          void server.close();
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, body);
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
    flooded,
    close: () =>
      new Promise((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
}

/** Writes `bytes` bytes of a never-ending JSON string, honouring backpressure; what was written. */
async function flood(res: ServerResponse, bytes: number): Promise<number> {
  res.writeHead(200, { 'content-type': 'application/json' });
  const chunk = Buffer.alloc(64 * 1024, 'x');
  let sent = 0;
  let closed = false;
  res.once('close', () => (closed = true));
  res.write('{"jsonrpc":"2.0","id":0,"result":"');
  while (sent < bytes && !closed) {
    sent += chunk.length;
    if (!res.write(chunk))
      await new Promise<void>((resolve) => {
        res.once('drain', resolve);
        res.once('close', resolve);
      });
  }
  if (!closed) res.end('"}');
  return sent;
}
