// Configuration is one zod schema over the environment, parsed once at start-up. A bad value stops
// the process with a message that names the variable and says what to fix.
import { reconcilerEnv } from '@berth/operator';
import { z } from 'zod';
import { parseSecretsKey } from './sealed.ts';
import { parseAmount } from './money.ts';

const port = z.coerce
  .number({ error: 'must be a number' })
  .int('must be a whole number')
  .min(0, 'must be between 0 and 65535')
  .max(65535, 'must be between 0 and 65535');

const positiveInt = (what: string) =>
  z.coerce
    .number({ error: `must be a number (${what})` })
    .int('must be a whole number')
    .positive('must be greater than 0');

export const configSchema = z
  .object({
    // The reconciler's variables (local mode runs it): BERTH_PROVISIONING_TIMEOUT_SECONDS, HF_ENDPOINT, …
    ...reconcilerEnv.shape,
    PORT: port.default(8080).describe('TCP port the API listens on'),
    HOST: z
      .string()
      .min(1)
      .optional()
      .describe(
        'Address the API binds. Unset: 0.0.0.0 in a pod or with a cluster configured, else 127.0.0.1 (local mode: this machine only)',
      ),
    DATABASE_URL: z
      .string()
      .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
      .optional()
      .describe('PostgreSQL URL. Unset: an embedded PostgreSQL (PGlite) in BERTH_DATA_DIR'),
    DB_POOL_SIZE: positiveInt('connections').default(10).describe('PostgreSQL connection pool size'),
    BERTH_DATA_DIR: z
      .string()
      .min(1)
      .default('.data')
      .describe('Directory for the embedded database and local state'),
    ADMIN_TOKEN: z
      .string()
      .min(16, 'must be at least 16 characters (use e.g. `openssl rand -hex 24`)')
      .optional()
      .describe(
        'Bearer token for /admin routes. Required with DATABASE_URL; generated into BERTH_DATA_DIR otherwise',
      ),
    KEY_HASH_SECRET: z
      .string()
      .min(32, 'must be at least 32 characters')
      .optional()
      .describe('When set, API keys are stored as HMAC-SHA-256 with this secret instead of SHA-256'),
    LOG_LEVEL: z
      .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
        error: 'must be one of fatal, error, warn, info, debug, trace, silent',
      })
      .default('info')
      .describe('Log level'),
    OTEL_EXPORTER_OTLP_ENDPOINT: z
      .url({ protocol: /^https?$/, error: 'must be an http(s) URL such as http://otel-collector:4318' })
      .optional()
      .describe(
        'OpenTelemetry collector (OTLP/HTTP): set, the API exports spans of its inference calls to <url>/v1/traces (docs/tracing.md); unset, tracing is off and costs nothing (a client traceparent still reaches the engine)',
      ),
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: z
      .url({
        protocol: /^https?$/,
        error: 'must be an http(s) URL such as http://otel-collector:4318/v1/traces',
      })
      .optional()
      .describe('The traces URL itself (wins over OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces)'),
    OTEL_EXPORTER_OTLP_PROTOCOL: z
      .enum(['http/json'], {
        error: 'must be http/json: Berth exports OTLP over HTTP with JSON bodies (a collector’s port 4318)',
      })
      .optional()
      .describe('OTLP transport; only http/json'),
    OTEL_EXPORTER_OTLP_HEADERS: z
      .string()
      .regex(/^[^=,]+=[^,]*(,[^=,]+=[^,]*)*$/, 'must be name=value pairs separated by commas')
      .optional()
      .describe("Headers sent to the collector, e.g. 'authorization=Bearer …' (values may be URL-encoded)"),
    OTEL_SERVICE_NAME: z.string().min(1).default('berth-api').describe("Spans' service.name"),
    OTEL_SDK_DISABLED: z
      .enum(['true', 'false'], { error: 'must be true or false' })
      .default('false')
      .describe('true: no spans exported even with an endpoint set'),
    MAX_BODY_BYTES: positiveInt('bytes')
      .default(1_048_576)
      .describe('Largest accepted request body; larger gets 413'),
    BODY_TIMEOUT_MS: positiveInt('milliseconds')
      .default(60_000)
      .describe(
        'How long a client may take to send a whole request, headers and body; slower gets 408 and the connection closed (responses, streams included, are not limited by it)',
      ),
    BERTH_MODELS_FILE: z
      .string()
      .min(1)
      .optional()
      .describe(
        'JSON/YAML file of Elastic catalog entries (`{"models": {"<name>": <entry>}}`), applied at start-up (idempotent)',
      ),
    ELASTIC_COOLDOWN_MS: positiveInt('milliseconds')
      .default(5_000)
      .describe('How long an Elastic backend that failed (5xx, connection error, 429) is skipped'),
    SHUTDOWN_GRACE_MS: positiveInt('milliseconds')
      .default(15_000)
      .describe('On SIGTERM, how long requests in flight may finish before the process exits'),
    REVOCATION_ACK_TIMEOUT_MS: positiveInt('milliseconds')
      .default(2_000)
      .describe('How long DELETE /api/keys/{id} waits for every API replica to confirm it dropped the key'),
    KEY_OUTAGE_GRACE_MS: z.coerce
      .number({ error: 'must be a number (milliseconds)' })
      .int('must be a whole number')
      .min(0, 'must be 0 or more')
      .default(120_000)
      .describe(
        'While the database cannot be reached, keys this replica verified before the outage keep working for this long (0: every call answers 503 during an outage)',
      ),
    KEY_TOUCH_INTERVAL_MS: positiveInt('milliseconds')
      .default(10_000)
      .describe("How often keys' last-used times are written (batched, off the request path)"),
    KUBECONFIG: z
      .string()
      .optional()
      .describe(
        'kubeconfig of the cluster endpoints run on; unset: in-cluster credentials when running in a pod',
      ),
    BERTH_NAMESPACE: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a Kubernetes namespace name')
      .default('default')
      .describe('Namespace of the DedicatedEndpoint resources the API creates and serves'),
    BERTH_CATALOG_FILE: z
      .string()
      .optional()
      .describe('JSON/YAML instance-type catalog (GET /api/hardware); unset: built-in'),
    BERTH_OPERATOR_URL: z
      .url({ protocol: /^http$/, error: 'must be a URL such as http://berth-operator-wake.berth.svc:8080' })
      .optional()
      .describe(
        "The operator's metrics port, where a wake is told to its leader at once (every address the host resolves to is asked); unset: the wake annotation alone",
      ),
    BERTH_WAKE_TOKEN: z
      .string()
      .min(16, 'must be at least 16 characters')
      .optional()
      .describe("The operator's BERTH_WAKE_TOKEN"),
    PUBLIC_URL: z
      .string()
      .url('must be a URL such as https://berth.example.com')
      .optional()
      .describe("Base URL clients use, for endpoints' baseUrl; unset: from the request's Host header"),
    TRUST_PROXY: z
      .enum(['true', 'false'], { error: 'must be true or false' })
      .default('false')
      .transform((v) => v === 'true')
      .describe('Trust X-Forwarded-* from a reverse proxy (client addresses for Public rate limits)'),
    WAKE_HOLD_TIMEOUT_MS: positiveInt('milliseconds')
      .default(240_000)
      .describe(
        'How long a request to a sleeping endpoint is held while it wakes (OpenAI SDKs time out at 600 s)',
      ),
    WAKE_HEARTBEAT_MS: positiveInt('milliseconds')
      .default(5_000)
      .describe(
        'How often a held streaming request receives an SSE comment (`: waking <stage> <elapsed>s`) while its endpoint wakes',
      ),
    WAKE_RETRY_AFTER_SECONDS: positiveInt('seconds')
      .max(3600, 'must be at most 3600 seconds')
      .default(30)
      .describe(
        'Retry-After of a 503 for a waking endpoint none of whose wakes was measured yet; after one, what is left of the p95 of its recent wakes',
      ),
    REQUEST_TIMEOUT_MS: positiveInt('milliseconds')
      .default(780_000)
      .describe('Wall-clock limit of one proxied call, streaming included (13 minutes)'),
    PROXY_RETRIES: z.coerce.number().int().min(0).max(5).default(2).describe('Retries before the first byte'),
    ENGINE_LOAD_SAMPLE_MS: z.coerce
      .number({ error: 'must be a number (milliseconds; 0 turns sampling off)' })
      .int('must be a whole number')
      .refine(
        (v) => v === 0 || (v >= 100 && v <= 60_000),
        'must be 0 (off) or between 100 and 60000 milliseconds',
      )
      .default(250)
      .describe(
        "How often each API replica reads the engines' `vllm:num_requests_running` / `waiting` (their /metrics) for leastLoad and prefixAffinity endpoints that had calls recently, so it also counts other API replicas' calls; 0: off (each replica counts only its own)",
      ),
    PUBLIC_RATE_LIMIT_PER_ENDPOINT: positiveInt('requests per minute')
      .default(600)
      .describe('Requests per minute a Public endpoint accepts from everyone together'),
    PUBLIC_RATE_LIMIT_PER_CLIENT: positiveInt('requests per minute')
      .default(60)
      .describe('Requests per minute a Public endpoint accepts from one client address'),
    REDIS_URL: z
      .string()
      .regex(/^rediss?:\/\//, 'must be a redis:// or rediss:// URL')
      .optional()
      .describe('Redis for rate limits shared by every API replica; unset: per process'),
    USAGE_FLUSH_INTERVAL_MS: positiveInt('milliseconds')
      .default(5_000)
      .describe('How often token usage is written (batched)'),
    BERTH_RUNTIME: z
      .enum(['auto', 'kubernetes', 'local'], { error: 'must be auto, kubernetes or local' })
      .default('auto')
      .describe(
        'Where endpoints run. auto: Kubernetes when KUBECONFIG is set or in a pod, else local processes with the embedded database (no DATABASE_URL)',
      ),
    BERTH_LOCAL_ENGINE: z
      .enum(['sim', 'vllm'], { error: 'must be sim or vllm' })
      .default('sim')
      .describe('Local mode: run each replica as the engine simulator, or as `vllm serve` from PATH'),
    BERTH_LOCAL_ENGINE_ARGS: z
      .string()
      .default('')
      .transform((s) => s.split(/\s+/).filter(Boolean))
      .describe(
        'Local mode: arguments appended to every engine command line, split on spaces (e.g. "--startup-delay-ms 2000")',
      ),
    BERTH_LOCAL_LOG_MAX_BYTES: positiveInt('bytes')
      .default(1_048_576)
      .describe('Local mode: size of an endpoint log file before it is rotated (one older file is kept)'),
    BERTH_LOCAL_STOP_GRACE_MS: positiveInt('milliseconds')
      .default(30_000)
      .describe('Local mode: how long a stopping engine may drain after SIGTERM before it is killed'),
    // ── Per-account quotas (apps/api/src/accounts/quotas.ts) ──
    BERTH_QUOTA_KEYS: positiveInt('active API keys')
      .default(100)
      .describe(
        'Active (not revoked) API keys one account may hold; POST /api/keys beyond it answers 403 `quota_exceeded`',
      ),
    BERTH_QUOTA_ENDPOINTS: positiveInt('dedicated endpoints')
      .default(20)
      .describe(
        'Dedicated endpoints (not being terminated) one account may have; creating one beyond it answers 403 `quota_exceeded`',
      ),
    BERTH_QUOTA_CHRONOS_RUNS: positiveInt('Chronos runs')
      .default(100)
      .describe(
        'Chronos scheduled runs one account may have; POST /api/chronos/runs beyond it answers 403 `quota_exceeded`',
      ),
    BERTH_QUOTA_GPUS: positiveInt('GPUs')
      .default(64)
      .describe(
        "GPUs one account's endpoints may scale to together: the sum of scaling.maxReplicas × hardware.gpuCount; a create or change beyond it answers 403 `quota_exceeded`",
      ),
    // ── Billing (apps/api/src/billing) ──
    BERTH_CURRENCY: z
      .string()
      .regex(/^[A-Z]{3}$/, 'must be a three-letter currency code such as USD')
      .default('USD')
      .describe('The one currency of balances, prices and invoices (a label: amounts are never converted)'),
    BERTH_FREE_QUERIES: z.coerce
      .number({ error: 'must be a number (queries)' })
      .int('must be a whole number')
      .min(0, 'must be 0 or more')
      .default(20)
      .describe('Free Elastic queries of an account that was never credited'),
    BILLING_FLUSH_INTERVAL_MS: positiveInt('milliseconds')
      .default(1_000)
      .describe(
        'How often each API replica writes the calls it settled (one transaction per account); a killed replica loses at most this much',
      ),
    BILLING_LEASE_TTL_MS: positiveInt('milliseconds')
      .default(30_000)
      .refine((v) => v >= 5_000, 'must be at least 5000')
      .describe(
        "How long a replica's slice of a balance lives without being renewed; a dead replica's slice is unavailable this long",
      ),
    BILLING_RECLAIM_WAIT_MS: positiveInt('milliseconds')
      .default(500)
      .describe(
        'How long a replica short of balance waits for the others to give back unused slices before answering 402',
      ),
    BILLING_SETTLE_WAIT_MS: z.coerce
      .number({ error: 'must be a number (milliseconds)' })
      .int('must be a whole number of milliseconds')
      .min(0, 'must be 0 or more (0: answer 402 without waiting)')
      .max(60_000, 'must be at most 60000 (a call waits this long before its 402)')
      .default(5_000)
      .describe(
        "How long a call that is short only because calls in flight hold the balance (or its key's spend limit) waits for them to settle before answering 402",
      ),
    BILLING_GPU_SYNC_INTERVAL_MS: positiveInt('milliseconds')
      .default(30_000)
      .describe(
        "How often the GPU meter re-reads every endpoint's replicas (besides every change it is told of): a replica that ends while no API replica runs is billed up to the last such pass",
      ),
    // ── Dashboard sign-in (apps/api/src/accounts/sign-in) ──
    BERTH_OIDC_ISSUER: z
      .string()
      .url('must be the issuer URL of an OpenID Connect provider, e.g. https://accounts.google.com')
      .refine((u) => {
        const url = new URL(u);
        return url.protocol === 'https:' || isLoopbackHost(url.hostname);
      }, 'must be an https:// URL (plain http:// only for a provider on localhost)')
      .optional()
      .describe('OpenID Connect issuer the dashboard signs in with (its /.well-known/openid-configuration)'),
    BERTH_OIDC_CLIENT_ID: z.string().min(1).optional().describe('The dashboard’s client id at that issuer'),
    BERTH_OIDC_CLIENT_SECRET: z.string().min(1).optional().describe('The dashboard’s client secret'),
    BERTH_DEV_IDP: z
      .enum(['auto', 'true', 'false'], { error: 'must be auto, true or false' })
      .default('auto')
      .describe(
        'The in-process development identity provider at /idp. auto: on with the embedded database and no BERTH_OIDC_ISSUER',
      ),
    BERTH_SESSION_TTL_HOURS: positiveInt('hours')
      .default(12)
      .describe('How long a dashboard session lasts after sign-in'),
    // ── Managed tools (apps/api/src/tools) ──
    BERTH_SECRETS_KEY: z
      .string()
      .refine(
        (v) => parseSecretsKey(v) !== undefined,
        'must be 32 bytes as 64 hex digits or base64 (use e.g. `openssl rand -hex 32`)',
      )
      .optional()
      .describe(
        "Key that seals secrets at rest (MCP servers' headers, Elastic external backends' API keys). Unset: generated into BERTH_DATA_DIR with the embedded database; with DATABASE_URL, such secrets are refused",
      ),
    MANAGED_TOOL_MAX_STEPS: positiveInt('model calls')
      .default(16)
      .describe('Model calls one managed tool loop may make before it must answer with the results so far'),
    MANAGED_TOOL_MAX_RESPONSE_BYTES: positiveInt('bytes')
      .max(67_108_864, 'must be at most 67108864 (64 MiB)')
      .default(1_048_576)
      .describe(
        "Largest answer read from a managed tool's MCP server (tools/list or a tool call); a larger one is cut off: the model reads an error as the tool's result and nothing is charged",
      ),
    OLYMPUS_ROUTE_TIMEOUT_MS: positiveInt('milliseconds')
      .default(300)
      .describe(
        "Budget of Olympus's one embedding call per request (policy routes); over it, or failed, Olympus chooses by objective",
      ),
    // ── Chronos, scheduled runs (apps/api/src/chronos) ──
    CHRONOS_ENABLED: z
      .enum(['true', 'false'], { error: 'must be true or false' })
      .default('true')
      .transform((v) => v === 'true')
      .describe(
        'false turns Chronos off platform-wide: its routes answer 403 chronos_disabled and fires pass without executions; nothing is deleted',
      ),
    CHRONOS_RUN_FEE: z
      .string()
      .refine(
        (v) => parseAmount(v) !== undefined,
        'must be a decimal string with at most 6 decimals, e.g. "0.001"',
      )
      .default('0.001')
      .transform((v) => parseAmount(v)!)
      .describe(
        'Charged from the prepaid balance per execution that ran a step, besides its model and tool steps',
      ),
    CHRONOS_STEP_TIMEOUT_MS: positiveInt('milliseconds')
      .max(780_000, 'must be at most 780000 (the 13-minute wall clock)')
      .default(780_000)
      .describe('Wall clock of one step of a Chronos execution'),
    CHRONOS_CONCURRENCY: positiveInt('executions')
      .default(32)
      .describe('Chronos executions one API replica runs at once'),
    CHRONOS_PREWARM_SECONDS: z.coerce
      .number({ error: 'must be a whole number of seconds (0 turns pre-warm off)' })
      .int('must be a whole number of seconds (0 turns pre-warm off)')
      .min(0, 'must be at least 0 (0 turns pre-warm off)')
      .max(3600, 'must be at most 3600 (an hour)')
      .default(120)
      .describe(
        'How long before a fire Chronos wakes the hibernated platform endpoints its chat steps call, so the first step does not wait for a cold start; 0 turns pre-warm off',
      ),
    JOBS_MONITOR_INTERVAL_SECONDS: positiveInt('seconds')
      .default(30)
      .describe(
        "How often pg-boss checks jobs' expiry and heartbeats (Chronos looks for its executions' lapsed heartbeats itself every 5 s: one whose replica died is marked failed within about 15 s)",
      ),
    // ──
  })
  .superRefine((c, ctx) => {
    if (c.BILLING_LEASE_TTL_MS < 3 * c.BILLING_FLUSH_INTERVAL_MS)
      ctx.addIssue({
        code: 'custom',
        path: ['BILLING_LEASE_TTL_MS'],
        message: 'must be at least three times BILLING_FLUSH_INTERVAL_MS (leases are renewed when flushed)',
      });
    const oidc = [c.BERTH_OIDC_ISSUER, c.BERTH_OIDC_CLIENT_ID, c.BERTH_OIDC_CLIENT_SECRET];
    if (oidc.some(Boolean) && !oidc.every(Boolean)) {
      for (const [name, v] of [
        ['BERTH_OIDC_ISSUER', c.BERTH_OIDC_ISSUER],
        ['BERTH_OIDC_CLIENT_ID', c.BERTH_OIDC_CLIENT_ID],
        ['BERTH_OIDC_CLIENT_SECRET', c.BERTH_OIDC_CLIENT_SECRET],
      ] as const)
        if (!v)
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message:
              'is required too: BERTH_OIDC_ISSUER, BERTH_OIDC_CLIENT_ID and BERTH_OIDC_CLIENT_SECRET go together',
          });
    }
    if (c.BERTH_OIDC_ISSUER && c.BERTH_DEV_IDP === 'true') {
      ctx.addIssue({
        code: 'custom',
        path: ['BERTH_DEV_IDP'],
        message: 'cannot be true with BERTH_OIDC_ISSUER set: the dashboard signs in with one provider',
      });
    }
    if (c.BERTH_OPERATOR_URL && !c.BERTH_WAKE_TOKEN)
      ctx.addIssue({
        code: 'custom',
        path: ['BERTH_WAKE_TOKEN'],
        message: "is required with BERTH_OPERATOR_URL: the operator's BERTH_WAKE_TOKEN",
      });
    if (c.DATABASE_URL && !c.ADMIN_TOKEN)
      ctx.addIssue({
        code: 'custom',
        path: ['ADMIN_TOKEN'],
        message: 'is required when DATABASE_URL is set (use e.g. `openssl rand -hex 24`)',
      });
  });

export type Config = z.infer<typeof configSchema>;

/** localhost, 127.x.x.x, [::1]: where plain HTTP stays on this machine. */
export function isLoopbackHost(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127\./.test(hostname);
}

export class ConfigError extends Error {}

export function parseConfig(env: Record<string, string | undefined>): Config {
  // An empty variable means "not set", as in most shells' `FOO= cmd`.
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const result = configSchema.safeParse(cleaned);
  if (result.success) return result.data;
  const lines = result.error.issues.map((i) => {
    const name = i.path.join('.') || '(config)';
    const got =
      typeof cleaned[name] === 'string'
        ? ` (got ${JSON.stringify(redactIfSecret(name, cleaned[name]))})`
        : '';
    return `  - ${name}: ${i.message}${got}`;
  });
  throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
}

function redactIfSecret(name: string, value: string | undefined): string | undefined {
  return /TOKEN|SECRET|DATABASE_URL|OTLP_HEADERS/.test(name) ? '***' : value;
}
