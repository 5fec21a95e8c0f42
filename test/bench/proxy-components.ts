// `npm run bench proxy-components`: what each piece of Berth's own per-request work on `/api/d/<id>`
// costs, beyond what any proxy does (HTTP in and out, undici): each piece is the real module's code,
// run in this process in a loop on the bench's request and answer (16 tokens), µs per call after a
// warm-up. The proxy-shipped benchmark measures the whole; this says where Berth's share goes.
import { hash, randomUUID } from 'node:crypto';
import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import os from 'node:os';
import { pino } from 'pino';
import { bodyBytes, keepBodyBytes } from '../../apps/api/src/http/body-bytes.ts';
import { checkJson, jsonObjectBody, parse } from '../../apps/api/src/http/validate.ts';
import { createMetrics } from '../../apps/api/src/platform/metrics.ts';
import { endpointMetrics } from '../../apps/api/src/dedicated/metrics.ts';
import { callScope } from '../../apps/api/src/dedicated/proxy/scope.ts';
import { SseUsageTap, usageOf } from '../../apps/api/src/dedicated/proxy/sse.ts';
import { usageRecorder } from '../../apps/api/src/dedicated/proxy/usage.ts';
import { affinityKey } from '../../apps/api/src/dedicated/upstream/affinity.ts';
import { f } from './proxy.ts';
import { machine } from './stats.ts';

const N = Number(process.env.BENCH_COMPONENT_ITERATIONS ?? 200_000);

function time(fn: (i: number) => unknown): number {
  for (let i = 0; i < N / 10; i++) fn(i);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) fn(i);
  return Number(process.hrtime.bigint() - t0) / 1e3 / N;
}

export async function benchProxyComponents(): Promise<string> {
  const load = os.loadavg();
  const body = Buffer.from(
    JSON.stringify({
      model: 'berth/bench',
      messages: [{ role: 'user', content: 'benchmark request number 1' }],
      max_tokens: 16,
      ignore_eos: true,
    }),
  );
  const parsed = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
  const answer = Buffer.from(
    JSON.stringify({
      id: 'cmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'berth/bench',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'lorem ipsum dolor sit amet '.repeat(4) },
          finish_reason: 'length',
        },
      ],
      usage: { prompt_tokens: 12, completion_tokens: 16, total_tokens: 28 },
    }),
  );
  const metrics = createMetrics();
  const endpoint = endpointMetrics(metrics.registry, { list: () => [] });
  const usage = usageRecorder(
    { add: async () => {} } as unknown as Parameters<typeof usageRecorder>[0],
    pino({ level: 'silent' }),
    3_600_000,
  );
  const socket = new Socket();
  const req = new IncomingMessage(socket);
  const res = Object.assign(new ServerResponse(req), { app: { locals: {} }, locals: {} });
  const key = 'berth_' + 'k'.repeat(40);
  const sse = Buffer.from(
    Array.from(
      { length: 16 },
      (_, i) =>
        `data: {"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"berth/bench","choices":[{"index":0,"delta":{"content":"tok${i}"},"finish_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":${13 + i},"completion_tokens":${i + 1}}}\n\n`,
    ).join(''),
  );
  const rows: [string, number][] = [
    ['key digest (SHA-256 of the Bearer value, the cache key)', time(() => hash('sha256', key, 'hex'))],
    ['request id (a UUID) and its header', time(() => res.setHeader('x-request-id', randomUUID()))],
    [
      'body: decode and JSON.parse, bytes kept',
      time(() => {
        const b = JSON.parse(body.toString('utf8')) as object;
        keepBodyBytes(b, body);
        return b;
      }),
    ],
    [
      'body: depth check and schema (checkJson, jsonObjectBody)',
      time(() => {
        checkJson(parsed, 'request body', { text: false });
        return parse(jsonObjectBody, parsed);
      }),
    ],
    ['affinity key (routing among replicas)', time(() => affinityKey(parsed))],
    ['body upstream: its kept bytes (was JSON.stringify)', time(() => bodyBytes(parsed))],
    ['(JSON.stringify of the body, before 70528f6)', time(() => JSON.stringify(parsed))],
    [
      'call scope: wall-clock timer, close and revocation listeners, created and ended',
      time(() => callScope(res as never, undefined, 780_000).end()),
    ],
    ['answer: JSON.parse and usage', time(() => usageOf(JSON.parse(answer.toString('utf8'))))],
    [
      'usage recorded (in-memory batch) and token counters',
      time(() => {
        usage.record({ accountId: 'acct', endpointId: 'endpt-x', promptTokens: 12, completionTokens: 16 });
        endpoint.tokens('endpt-x', 12, 16);
      }),
    ],
    [
      'request metrics (status counter, duration histogram, endpoint status counter)',
      time((i) => {
        metrics.httpRequestCells.add(1, '/api/d/:id/chat/completions', 'POST', 200);
        metrics.httpDuration.observe(0.001 + (i % 7) / 1000, '/api/d/:id/chat/completions', 'POST');
        endpoint.proxied('endpt-x', 200);
      }),
    ],
    [
      'streamed: usage tap over a 16-event stream (usage read, per-chunk usage cut out)',
      time(() => {
        const tap = new SseUsageTap({ stripFinal: true, stripContinuous: true });
        tap.push(sse);
        return tap.usage;
      }),
    ],
  ];
  await usage.close();
  return [
    `### Components (${new Date().toISOString().slice(0, 10)}, ${machine()}, load average at start ${load.map((x) => x.toFixed(2)).join(' / ')})`,
    '',
    `Each piece of Berth's own work per \`/api/d/<id>\` call, as the module's code in a loop (${N} calls after ${N / 10} of warm-up) on the bench's request and answer. The rest of a call — node:http in, undici out, Express's request and response objects, promises — is measured as a whole by proxy-shipped.`,
    '',
    '| component | µs per call |',
    '|---|---|',
    ...rows.map(([name, us]) => `| ${name} | ${f(us, 2)} |`),
  ].join('\n');
}
