// platform/tracing.ts: off, it is the same no-op objects and adds no headers; on, spans reach an
// OTLP/HTTP collector with the parents they were made under, the client's traceparent included,
// and the engine call carries a traceparent of the same trace.
import { afterEach, describe, expect, it } from 'vitest';
import { startOtlpReceiver } from '@berth/test/support/otlp-receiver';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseConfig } from '../src/platform/config.ts';
import {
  childSpan,
  openRequestTrace,
  startTracing,
  traceHeaders,
  tracingOff,
  tracingOptions,
} from '../src/platform/tracing.ts';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

describe('tracing', () => {
  it('off: nothing is made, nothing is added to a call', () => {
    const ctx = tracingOff.extract({
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    });
    const a = tracingOff.span('x', ctx);
    const b = tracingOff.span('y', a.context);
    expect(a).toBe(b);
    expect(tracingOff.inject(b.context)).toEqual({});
  });

  it('on: spans reach the collector under the client’s traceparent, and the engine call carries the trace', async () => {
    const receiver = await startOtlpReceiver();
    closers.push(() => receiver.close());
    const tracing = await startTracing({
      url: `${receiver.url}/v1/traces`,
      serviceName: 'berth-api',
      flushIntervalMs: 50,
    });
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const clientSpan = 'b7ad6b7169203331';
    const request = tracing.span(
      'POST /api/chat/completions',
      tracing.extract({ traceparent: `00-${traceId}-${clientSpan}-01` }),
      { 'berth.catalog_model': 'main' },
      'server',
    );
    const call = tracing.span('upstream', request.context, { 'berth.backend': 'primary' }, 'client');
    const headers = tracing.inject(call.context);
    expect(headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    call.end(Object.assign(new Error('over capacity'), { code: 'rate_limited' }));
    request.end();
    await tracing.close();
    const byName = Object.fromEntries(receiver.spans.map((s) => [s.name, s]));
    expect(byName['POST /api/chat/completions']).toMatchObject({
      traceId,
      parentSpanId: clientSpan,
      service: 'berth-api',
      attributes: { 'berth.catalog_model': 'main' },
    });
    expect(byName.upstream).toMatchObject({
      traceId,
      parentSpanId: byName['POST /api/chat/completions']!.spanId,
      attributes: { 'berth.backend': 'primary', 'berth.outcome': 'rate_limited' },
      status: { code: 2, message: 'rate_limited' },
    });
    // The engine's span would be the child of the upstream call's.
    expect(headers.traceparent!.split('-')[2]).toBe(byName.upstream!.spanId);
  });
});

describe('tracing off, per request', () => {
  const request = (headers: Record<string, string>) => ({ headers, method: 'POST' }) as IncomingMessage;
  const response = {} as ServerResponse;

  it('a request without trace headers has no trace: nothing made, nothing added to the engine call', () => {
    const trace = openRequestTrace(request({}), response, '/api/chat/completions');
    expect(trace).toBeUndefined();
    expect(traceHeaders(trace?.context)).toBeUndefined();
    expect(childSpan('berth.auth', trace?.context)).toBeUndefined();
  });

  it('a client’s traceparent and tracestate go to the engine as they came, and no span is made', () => {
    const headers = {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      tracestate: 'vendor=opaque,other=x',
    };
    const trace = openRequestTrace(request(headers), response, '/api/chat/completions');
    expect(traceHeaders(trace?.context)).toEqual(headers);
    expect(childSpan('berth.auth', trace?.context)).toBeUndefined();
  });
});

describe('the collector from the configuration', () => {
  const options = (env: Record<string, string>) => tracingOptions(parseConfig(env));

  it('off unless an endpoint is set, and off with OTEL_SDK_DISABLED=true', () => {
    expect(options({})).toBeUndefined();
    expect(
      options({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }),
    ).toBeUndefined();
  });

  it('<endpoint>/v1/traces, the traces URL when given, the service name and the headers', () => {
    expect(options({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/' })).toEqual({
      url: 'http://c:4318/v1/traces',
      serviceName: 'berth-api',
    });
    expect(
      options({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://vendor.example/otlp/traces',
        OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20abc, x-team = ml',
        OTEL_SERVICE_NAME: 'berth-eu',
      }),
    ).toEqual({
      url: 'https://vendor.example/otlp/traces',
      serviceName: 'berth-eu',
      headers: { authorization: 'Bearer abc', 'x-team': 'ml' },
    });
  });

  it('refuses what it cannot do, naming the variable; the headers stay out of the message', () => {
    expect(() => parseConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(
      /OTEL_EXPORTER_OTLP_PROTOCOL: must be http\/json/,
    );
    expect(() => parseConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(
      /OTEL_EXPORTER_OTLP_ENDPOINT: must be an http\(s\) URL/,
    );
    const bad = () => parseConfig({ OTEL_EXPORTER_OTLP_HEADERS: 'secret-token-without-name' });
    expect(bad).toThrow(
      /OTEL_EXPORTER_OTLP_HEADERS: must be name=value pairs separated by commas \(got "\*\*\*"\)/,
    );
  });
});
