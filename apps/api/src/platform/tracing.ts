// Traces, OpenTelemetry: off by default, and then free — every call below is a no-op on a shared
// object, nothing is loaded, nothing allocated per request. With OTEL_EXPORTER_OTLP_ENDPOINT set,
// spans go to that collector over OTLP/HTTP (JSON) in batches; W3C `traceparent`/`tracestate` are
// read from a client's request and written onto the engine call, so a trace runs from the client
// through Berth into vLLM (which the operator points at a collector with --otlp-traces-endpoint).
//
// Contexts are passed explicitly (no async-hooks context manager on the hot path): a route makes the
// request's context from its headers (openRequestTrace), and hands it down with the call (`trace`).
// Off, a client's own `traceparent`/`tracestate` still reach the engine as they came: a header copied,
// nothing parsed, no span — vLLM run with --otlp-traces-endpoint then joins the client's trace itself.
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  createContextKey,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';

import type { Config } from './config.ts';

export type { Context };

/** One span: attributes as it goes, then its end (with the error that ended it, if one did). */
export interface TraceSpan {
  /** The context whose parent is this span (for the spans under it and the engine call's headers). */
  readonly context: Context;
  set(attributes: Attributes): void;
  end(error?: unknown): void;
}

export interface Tracing {
  readonly enabled: boolean;
  /** The context of a request's `traceparent`/`tracestate` (the root context without them). */
  extract(headers: Record<string, string | string[] | undefined>): Context;
  /** A span under `parent`; `server` for a request's own span, `client` for a call out. */
  span(
    name: string,
    parent: Context,
    attributes?: Attributes,
    kind?: 'server' | 'client' | 'internal',
  ): TraceSpan;
  /** The `traceparent`/`tracestate` headers of a call made in `ctx` (none when off). */
  inject(ctx: Context): Record<string, string>;
  /** Exports what is buffered and stops. */
  close(): Promise<void>;
}

const NOOP_SPAN: TraceSpan = { context: ROOT_CONTEXT, set() {}, end() {} };
const NO_HEADERS: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** Tracing off: the same few objects every time. */
export const tracingOff: Tracing = {
  enabled: false,
  extract: () => ROOT_CONTEXT,
  span: () => NOOP_SPAN,
  inject: () => NO_HEADERS,
  close: async () => {},
};

export interface TracingOptions {
  /** OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces. */
  url: string;
  serviceName: string;
  /** Extra headers for the collector (OTEL_EXPORTER_OTLP_HEADERS). */
  headers?: Record<string, string>;
  /** How long spans wait in the batch before they are sent. */
  flushIntervalMs?: number;
}

/** The collector the configuration names (OTEL_EXPORTER_OTLP_*), or undefined: tracing off. */
export function tracingOptions(
  c: Pick<
    Config,
    | 'OTEL_EXPORTER_OTLP_ENDPOINT'
    | 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'
    | 'OTEL_EXPORTER_OTLP_HEADERS'
    | 'OTEL_SERVICE_NAME'
    | 'OTEL_SDK_DISABLED'
  >,
): TracingOptions | undefined {
  if (c.OTEL_SDK_DISABLED === 'true') return undefined;
  const base = c.OTEL_EXPORTER_OTLP_ENDPOINT;
  const url = c.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? (base && `${base.replace(/\/+$/, '')}/v1/traces`);
  if (!url) return undefined;
  const headers = c.OTEL_EXPORTER_OTLP_HEADERS?.split(',').map((pair) => {
    const at = pair.indexOf('=');
    return [decodeURIComponent(pair.slice(0, at).trim()), decodeURIComponent(pair.slice(at + 1).trim())];
  });
  return {
    url,
    serviceName: c.OTEL_SERVICE_NAME,
    ...(headers ? { headers: Object.fromEntries(headers) as Record<string, string> } : {}),
  };
}

const getter: TextMapGetter<Record<string, string | string[] | undefined>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};
const setter: TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

const KINDS = { server: SpanKind.SERVER, client: SpanKind.CLIENT, internal: SpanKind.INTERNAL } as const;

/** Tracing on: the SDK is loaded only now, when a collector is configured. */
export async function startTracing(o: TracingOptions): Promise<Tracing> {
  const [{ TracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, { resourceFromAttributes }, core] =
    await Promise.all([
      import('@opentelemetry/sdk-trace'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/core'),
    ]);
  const propagator = new core.W3CTraceContextPropagator();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': o.serviceName }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: new OTLPTraceExporter({ url: o.url, ...(o.headers ? { headers: o.headers } : {}) }),
        scheduledDelayMillis: o.flushIntervalMs ?? 1_000,
      }),
    ],
  });
  const tracer = provider.getTracer('berth');
  return {
    enabled: true,
    extract: (headers) => propagator.extract(ROOT_CONTEXT, headers, getter),
    span(name, parent, attributes, kind = 'internal') {
      const span: Span = tracer.startSpan(
        name,
        { kind: KINDS[kind], ...(attributes ? { attributes } : {}) },
        parent,
      );
      let ended = false;
      return {
        context: trace.setSpan(parent, span),
        set: (a) => span.setAttributes(a),
        end(error) {
          if (ended) return;
          ended = true;
          if (error !== undefined) {
            // The code, never the message: an engine's message may quote the request.
            const code = errorCode(error);
            span.setStatus({ code: SpanStatusCode.ERROR, message: code });
            span.setAttribute('berth.outcome', code);
          }
          span.end();
        },
      };
    },
    inject(ctx) {
      const headers: Record<string, string> = {};
      propagator.inject(ctx, headers, setter);
      return headers;
    },
    close: () => provider.shutdown(),
  };
}

/** A closed vocabulary for the outcome attribute: an ApiError's code, else its class name. */
function errorCode(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : err instanceof Error ? err.name : 'error';
}

/**
 * The process's tracing: tracingOff until startApi starts it (OTEL_EXPORTER_OTLP_ENDPOINT). One per
 * process, like the collector it exports to, so the hot path asks one boolean (`tracing.enabled`)
 * instead of every layer carrying a tracer.
 */
export let tracing: Tracing = tracingOff;

/** Makes `t` the process's tracing; the returned function puts tracingOff back (if `t` is still it). */
export function useTracing(t: Tracing): () => void {
  tracing = t;
  return () => {
    if (tracing === t) tracing = tracingOff;
  };
}

const PASS_THROUGH = createContextKey('berth.trace-headers');

/**
 * A request's place in its trace (kept in `res.locals.trace` and handed down with the call): on, the
 * server span under the client's `traceparent`, ended with the response's status when it closes; off,
 * the client's `traceparent`/`tracestate` to pass to the engine unchanged — undefined without them,
 * so the common request costs one header lookup.
 */
export function openRequestTrace(
  req: IncomingMessage,
  res: ServerResponse,
  route: string,
): TraceSpan | undefined {
  if (!tracing.enabled) {
    const traceparent = req.headers.traceparent;
    if (typeof traceparent !== 'string') return undefined;
    const headers: Record<string, string> = { traceparent };
    if (typeof req.headers.tracestate === 'string') headers.tracestate = req.headers.tracestate;
    return { context: ROOT_CONTEXT.setValue(PASS_THROUGH, headers), set() {}, end() {} };
  }
  const method = req.method ?? 'GET';
  const span = tracing.span(
    `${method} ${route}`,
    tracing.extract(req.headers),
    { 'http.request.method': method, 'http.route': route },
    'server',
  );
  res.once('close', () => {
    const status = res.statusCode;
    span.set({ 'http.response.status_code': status });
    // A server span is an error for a 5xx only (OpenTelemetry's HTTP conventions); a 4xx is the client's.
    span.end(status >= 500 ? { code: String(status) } : undefined);
  });
  return span;
}

/** A span under `parent` when tracing is on and the call is traced; undefined (nothing made) otherwise. */
export function childSpan(
  name: string,
  parent: Context | undefined,
  attributes?: Attributes,
  kind?: 'server' | 'client' | 'internal',
): TraceSpan | undefined {
  return parent && tracing.enabled ? tracing.span(name, parent, attributes, kind) : undefined;
}

/**
 * `work`, ending `span` as it settles — with its error, or with the attributes `result` reads off its
 * value. Without a span (tracing off), `work` itself.
 */
export function endWith<T>(
  span: TraceSpan | undefined,
  work: Promise<T>,
  result?: (value: T) => Attributes,
): Promise<T> {
  if (!span) return work;
  return work.then(
    (value) => {
      if (result) span.set(result(value));
      span.end();
      return value;
    },
    (err: unknown) => {
      span.end(err);
      throw err;
    },
  );
}

/**
 * The trace headers of a call out made in `ctx`: on, a `traceparent` naming ctx's span (and the
 * client's `tracestate`); off, the client's own headers as they came; undefined for an untraced call.
 */
export function traceHeaders(ctx: Context | undefined): Record<string, string> | undefined {
  if (!ctx) return undefined;
  return tracing.enabled ? tracing.inject(ctx) : (ctx.getValue(PASS_THROUGH) as Record<string, string>);
}
