// Every operation of the API's own OpenAPI document × every kind of credential, each cell expecting
// the answer the operation's security requirement names (STYLE.md habit 16; spec §5 and §7). The
// operations are read from GET /openapi.json of the running API, so a route is covered the day it is
// added; the only per-route knowledge here is how to fill a path parameter with a resource of the
// owner (PATH_PARAMETERS), and a parameter it cannot fill fails its operation's test by name.
//
// Expected answers:
// - `security: []`: every credential passes (nothing is authenticated).
// - adminToken: the admin token passes; no Authorization header (a session cookie alone included) is
//   401 `Missing or invalid Authorization header`; any other Bearer token 401 `Invalid admin token`.
// - apiKey: no header 401 `Missing or invalid Authorization header`; garbage, a malformed key, a
//   revoked key or the admin token 401 `Invalid API key`; a key whose scope the document does not list
//   403 naming both scopes; the owner's session passes only where dashboardSession is listed, and
//   there, on a state change without X-CSRF-Token, is 403 (as the scheme's description says);
//   another account's key, on an operation naming the owner's resource, is refused: 403 (spec §7's
//   message) where the document's 403 names another account, else 404 exactly as for an id that does
//   not exist.
// Refusals are in the route family's body shape (spec §7), and the document lists each one among
// the operation's responses. "Passes" means authentication and authorization did: the status is
// neither 401 nor 403. Bodies are `{}` (most allowed cells end in 400) and `X-Berth-Hold: false`
// keeps a sleeping endpoint from holding a call: the operation's success is other suites' business.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { signIn, type CookieJar } from '@berth/test/support/oidc';

// ---------------------------------------------------------------------------------------------
// The document

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
interface DocResponse {
  description?: string;
  content?: Record<string, { schema?: { properties?: { error?: { type?: string } } } }>;
}
interface DocOperation {
  description?: string;
  security?: Record<string, string[]>[];
  responses: Record<string, DocResponse>;
}
interface Operation {
  method: Method;
  path: string;
  doc: DocOperation;
  /** The schemes of its security requirement: none (`[]`), adminToken, apiKey, dashboardSession. */
  schemes: Set<string>;
  /** The key scopes the document allows. */
  scopes: string[] | undefined;
}

const METHODS: readonly Method[] = ['get', 'post', 'put', 'patch', 'delete'];

function operationsOf(document: { paths: Record<string, Partial<Record<string, DocOperation>>> }) {
  const ops: Operation[] = [];
  for (const [p, item] of Object.entries(document.paths))
    for (const method of METHODS) {
      const doc = item[method];
      if (!doc) continue;
      // The scopes: the apiKey requirement's role list (OpenAPI 3.1 allows one for any scheme),
      // else the sentence the generator writes into the description today.
      const roles = doc.security?.find((r) => r.apiKey)?.apiKey;
      const listed = /Key scopes allowed: ([a-z, ]+)\./.exec(doc.description ?? '')?.[1]!.split(', ');
      ops.push({
        method,
        path: p,
        doc,
        schemes: new Set((doc.security ?? []).flatMap((r) => Object.keys(r))),
        scopes: roles?.length ? roles : listed,
      });
    }
  return ops;
}

/** Spec §7.1 (and §4 for Olympus): the OpenAI-style routes answer `{"error": {…}, "message"}`. */
const OPENAI_STYLE =
  /^\/api\/(?:chat\/completions|completions|embeddings|models|responses|d\/|b\/|olympus\/)/;
const familyOf = (p: string) => (OPENAI_STYLE.test(p) ? 'openai' : 'simple');

// Messages: spec §5 and §7, and apps/api/src/http/auth.ts for the scope refusal and the admin token.
const MISSING = 'Missing or invalid Authorization header';
const INVALID_KEY = 'Invalid API key';
const INVALID_ADMIN = 'Invalid admin token';
/** apps/api/src/platform/errors.ts (csrf_failed), as the dashboardSession scheme describes. */
const CSRF_REFUSAL =
  'Missing or invalid CSRF token: send the X-CSRF-Token header with the csrfToken of GET /auth/session';
const changesState = (op: Operation) => op.method !== 'get';
const scopeRefusal = (has: string, allowed: string[]) =>
  `This API key has scope "${has}"; this route needs a key with scope ${allowed.map((s) => `"${s}"`).join(' or ')}`;
/** Spec §7: another account's dedicated endpoint, on `/api/d/…` and on the management routes. */
const notOwned = (p: string) =>
  p.startsWith('/api/d/') ? 'Forbidden: Access denied.' : 'Unauthorized access to dedicated endpoint';

// ---------------------------------------------------------------------------------------------
// The API, its two accounts and the owner's resources

const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-security-matrix-'));
const api: TestApi = await startTestApi({
  BERTH_RUNTIME: 'local',
  BERTH_DATA_DIR: dataDir,
  BERTH_SECRETS_KEY: 'ab'.repeat(32),
  BERTH_DEV_IDP: 'true',
});
const OPERATIONS = operationsOf(await (await fetch(`${api.url}/openapi.json`)).json());

const OWNER = { subject: 'matrix-owner', name: 'Matrix Owner' };
const TOOL = 'matrix-tool';
const MODEL = 'matrix-model';

interface Resources {
  account: string;
  invoice: string;
  /** A key of the owner's that only DELETE /api/keys/{id} uses (it revokes it). */
  spareKey: string;
  endpoint: string;
  chronosRun: string;
}
let res: Resources;
const keys = {} as { inference: string; compute: string; global: string; revoked: string; other: string };

/**
 * How each path parameter is filled: the entry with the longest prefix of the path and the
 * parameter's name. `owned`: the value is the owner's, so another account's key must be refused.
 */
const PATH_PARAMETERS: { prefix: string; name: string; value: () => string; owned: boolean }[] = [
  { prefix: '/admin/accounts/', name: 'id', value: () => res.account, owned: true },
  { prefix: '/admin/accounts/', name: 'invoiceId', value: () => res.invoice, owned: true },
  { prefix: '/admin/tools/', name: 'tool_id', value: () => TOOL, owned: false },
  { prefix: '/admin/models/', name: 'name', value: () => MODEL, owned: false },
  { prefix: '/api/keys/', name: 'id', value: () => res.spareKey, owned: true },
  { prefix: '/api/billing/invoices/', name: 'id', value: () => res.invoice, owned: true },
  { prefix: '/api/tools/', name: 'tool_id', value: () => TOOL, owned: false },
  { prefix: '/api/chronos/runs/', name: 'id', value: () => res.chronosRun, owned: true },
  { prefix: '/api/models/', name: 'name', value: () => MODEL, owned: false },
  { prefix: '/api/endpoints/', name: 'id', value: () => res.endpoint, owned: true },
  { prefix: '/api/d/', name: 'id', value: () => res.endpoint, owned: true },
];

interface Filled {
  /** The path with the owner's resources. */
  path: string;
  /** The same path with every owned value replaced by one that does not exist. */
  unknown: string;
  /** Owned values and their unknown siblings. */
  owned: [string, string][];
}

function fill(op: Operation): Filled | string {
  let filled = op.path;
  let unknown = op.path;
  const owned: [string, string][] = [];
  for (const [, name] of op.path.matchAll(/\{(\w+)\}/g)) {
    const entry = PATH_PARAMETERS.filter((e) => e.name === name && op.path.startsWith(e.prefix)).sort(
      (a, b) => b.prefix.length - a.prefix.length,
    )[0];
    if (!entry)
      return `no value for the path parameter {${name}} of ${op.path}: add the owner's resource to PATH_PARAMETERS`;
    const value = entry.value();
    const sibling = value.slice(0, -3) + (value.endsWith('zzz') ? 'yyy' : 'zzz');
    filled = filled.replace(`{${name}}`, encodeURIComponent(value));
    unknown = unknown.replace(`{${name}}`, encodeURIComponent(entry.owned ? sibling : value));
    if (entry.owned) owned.push([value, sibling]);
  }
  return { path: filled, unknown, owned };
}

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
async function call(key: string, method: string, p: string, body?: unknown) {
  const r = await fetch(api.url + p, {
    method,
    headers: json(key),
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined, text };
}
async function created<T>(what: string, answer: Promise<{ status: number; body: T; text: string }>) {
  const a = await answer;
  if (a.status >= 300) throw new Error(`${what}: ${a.status} ${a.text}`);
  return a.body;
}
const admin = (method: string, p: string, body?: unknown) => call(ADMIN_TOKEN, method, p, body);

/** A dashboard session of the owner (a new one per operation, so a sign-out ends only its own). */
async function ownerSession() {
  const { jar } = await signIn(api.url, OWNER);
  const session = (await (await jar.fetch(`${api.url}/auth/session`)).json()) as {
    csrfToken: string;
    account: { id: string };
    newKey?: { value: string };
  };
  return { jar, csrf: session.csrfToken, account: session.account.id, newKey: session.newKey };
}

beforeAll(async () => {
  // The owner signs up through the development identity provider: an account and its default
  // inference key; the other scopes, a revoked key and a spare one come from the operator.
  const first = await ownerSession();
  const account = first.account;
  if (!first.newKey) throw new Error('the first sign-in did not sign up');
  keys.inference = first.newKey.value;
  const key = async (scope: string) =>
    created(
      `${scope} key`,
      admin('POST', `/admin/accounts/${account}/keys`, { name: `matrix-${scope}`, scope }),
    ) as Promise<{ id: string; value: string }>;
  keys.compute = (await key('compute')).value;
  keys.global = (await key('global')).value;
  const revoked = await key('inference');
  keys.revoked = revoked.value;
  await created('revocation', call(keys.global, 'DELETE', `/api/keys/${revoked.id}`));
  const spare = await key('inference');
  const other = (await created(
    'other account',
    admin('POST', '/admin/accounts', { name: 'matrix-other' }),
  )) as {
    account: { id: string };
  };
  keys.other = (
    (await created(
      'other global key',
      admin('POST', `/admin/accounts/${other.account.id}/keys`, { name: 'global', scope: 'global' }),
    )) as { value: string }
  ).value;

  // Both accounts have the same features on, so that only ownership tells them apart.
  await created(
    'catalog model',
    admin('PUT', `/admin/models/${MODEL}`, {
      kind: 'chat',
      backends: [{ baseUrl: 'http://127.0.0.1:9/v1', model: 'org/matrix' }],
      pricing: { inputPerMTok: '1.00', outputPerMTok: '2.00' },
    }),
  );
  await created(
    'tool',
    admin('PUT', `/admin/tools/${TOOL}`, {
      description: 'A tool of the matrix',
      url: 'http://127.0.0.1:9/mcp',
      price_per_call: '0.001',
    }),
  );
  for (const k of [keys.global, keys.other])
    for (const tool_id of ['chronos', TOOL])
      await created(`enable ${tool_id}`, call(k, 'POST', '/api/tools', { tool_id }));

  const endpoint = (await created(
    'endpoint',
    call(keys.compute, 'POST', '/api/endpoints', {
      name: 'matrix',
      model: 'org/matrix',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 60 },
    }),
  )) as { id: string };
  const run = (await created(
    'Chronos run',
    call(keys.inference, 'POST', '/api/chronos/runs', {
      name: 'matrix',
      schedule: '0 3 * * *',
      timezone: 'UTC',
      steps: [{ type: 'chat', model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }],
    }),
  )) as { id: string };

  // An issued invoice: an hour of GPU time two weeks ago, invoiced by the operator's run.
  const monday = new Date(Math.floor(Date.now() / 86_400_000) * 86_400_000);
  while (monday.getUTCDay() !== 1) monday.setTime(monday.getTime() - 86_400_000);
  const twoWeeksAgo = monday.getTime() - 14 * 86_400_000;
  const span = {
    endpointId: 'endpt-matrix-past',
    accountId: account,
    instanceType: 'nvidia-l4-24gb',
    gpusPerReplica: 1,
  };
  await api.billing.gpu.observe({ ...span, replicas: 1, at: new Date(twoWeeksAgo + 3_600_000) });
  await api.billing.gpu.observe({ ...span, replicas: 0, at: new Date(twoWeeksAgo + 2 * 3_600_000) });
  await created('invoice run', admin('POST', '/admin/billing/invoices/run'));
  const invoices = (await created('invoices', call(keys.global, 'GET', '/api/billing/invoices'))) as {
    data: { id: string }[];
  };
  if (!invoices.data[0]) throw new Error('no invoice was issued for the owner');

  res = {
    account,
    invoice: invoices.data[0].id,
    spareKey: spare.id,
    endpoint: endpoint.id,
    chronosRun: run.id,
  };
}, 120_000);

afterAll(async () => {
  await api?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
// Credentials and the answer each should get

type Credential =
  | { name: string; kind: 'none' }
  | { name: string; kind: 'bogus'; token: () => string }
  | { name: string; kind: 'admin' }
  | { name: string; kind: 'key'; scope: string; token: () => string }
  | { name: string; kind: 'other-account'; scope: 'global'; token: () => string }
  | { name: string; kind: 'session'; csrf: boolean };

const CREDENTIALS: Credential[] = [
  { name: 'no credential', kind: 'none' },
  { name: 'Bearer garbage', kind: 'bogus', token: () => 'garbage' },
  {
    name: 'a malformed key (svc_live_, wrong length)',
    kind: 'bogus',
    token: () => 'svc_live_' + 'a1B2'.repeat(4),
  },
  { name: "the owner's revoked key", kind: 'bogus', token: () => keys.revoked },
  { name: "the owner's inference key", kind: 'key', scope: 'inference', token: () => keys.inference },
  { name: "the owner's compute key", kind: 'key', scope: 'compute', token: () => keys.compute },
  { name: "the owner's global key", kind: 'key', scope: 'global', token: () => keys.global },
  { name: "another account's global key", kind: 'other-account', scope: 'global', token: () => keys.other },
  { name: "the owner's dashboard session", kind: 'session', csrf: true },
  { name: "the owner's dashboard session without X-CSRF-Token", kind: 'session', csrf: false },
  { name: 'the admin token', kind: 'admin' },
];

type Expected =
  | { pass: true }
  | { status: number; message: string }
  /** 404, the same answer as for ids that do not exist (the message names the id asked for). */
  | { likeUnknown: true }
  | { undocumented: string };

function expected(op: Operation, cred: Credential, filled: Filled): Expected {
  const { schemes, scopes } = op;
  const csrfMissing = cred.kind === 'session' && !cred.csrf && changesState(op);
  if (schemes.size === 0)
    // An open operation that reads the session says so: "Needs the X-CSRF-Token header" (sign-out).
    return csrfMissing && /X-CSRF-Token/.test(op.doc.description ?? '')
      ? { status: 403, message: CSRF_REFUSAL }
      : { pass: true };
  if (schemes.has('adminToken')) {
    if (cred.kind === 'admin') return { pass: true };
    if (cred.kind === 'none' || cred.kind === 'session') return { status: 401, message: MISSING };
    return { status: 401, message: INVALID_ADMIN };
  }
  if (!schemes.has('apiKey')) return { undocumented: `unknown security schemes ${[...schemes].join(', ')}` };
  if (!scopes) return { undocumented: 'the description names no "Key scopes allowed"' };
  switch (cred.kind) {
    case 'none':
      return { status: 401, message: MISSING };
    case 'bogus':
    case 'admin':
      return { status: 401, message: INVALID_KEY };
    case 'session':
      if (!schemes.has('dashboardSession')) return { status: 401, message: MISSING };
      return csrfMissing ? { status: 403, message: CSRF_REFUSAL } : { pass: true };
    case 'key':
      return scopes.includes(cred.scope)
        ? { pass: true }
        : { status: 403, message: scopeRefusal(cred.scope, scopes) };
    case 'other-account': {
      if (!scopes.includes(cred.scope)) return { status: 403, message: scopeRefusal(cred.scope, scopes) };
      if (!filled.owned.length) return { pass: true };
      if (/another account/i.test(op.doc.responses['403']?.description ?? ''))
        return { status: 403, message: notOwned(op.path) };
      if (op.doc.responses['404']) return { likeUnknown: true };
      return { undocumented: "neither a 403 for another account's resource nor a 404 is documented" };
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Running the cells

interface Answer {
  status: number;
  body: unknown;
  text: string;
}

async function send(op: Operation, cred: Credential, p: string, session?: { jar: CookieJar; csrf: string }) {
  const method = op.method.toUpperCase();
  const headers: Record<string, string> = { 'x-berth-hold': 'false' };
  if (method !== 'GET' && method !== 'DELETE') headers['content-type'] = 'application/json';
  if (cred.kind === 'bogus' || cred.kind === 'key' || cred.kind === 'other-account')
    Object.assign(headers, bearer(cred.token()));
  if (cred.kind === 'admin') Object.assign(headers, bearer(ADMIN_TOKEN));
  if (cred.kind === 'session' && cred.csrf && method !== 'GET') headers['x-csrf-token'] = session!.csrf;
  const init: RequestInit = {
    method,
    headers,
    redirect: 'manual',
    signal: AbortSignal.timeout(20_000),
    ...(headers['content-type'] ? { body: '{}' } : {}),
  };
  const r =
    cred.kind === 'session' ? await session!.jar.fetch(api.url + p, init) : await fetch(api.url + p, init);
  // An allowed call's body may be a stream (logs, SSE): only refusals are read.
  if (![401, 403, 404].includes(r.status)) {
    await r.body?.cancel();
    return { status: r.status, body: undefined, text: '' } satisfies Answer;
  }
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: reported as text
  }
  return { status: r.status, body, text } satisfies Answer;
}

/** The message of an error body in its route family's shape, or why the shape is wrong. */
function messageOf(p: string, body: unknown): { message: string } | { shape: string } {
  const b = body as Record<string, unknown> | undefined;
  if (familyOf(p) === 'openai') {
    const e = b?.error as Record<string, unknown> | undefined;
    const ok =
      b &&
      e &&
      Object.keys(b).sort().join() === 'error,message' &&
      Object.keys(e).sort().join() === 'code,message,param,type' &&
      typeof e.message === 'string' &&
      e.message === b.message &&
      typeof e.type === 'string';
    return ok
      ? { message: e.message as string }
      : { shape: 'not {"error": {message, type, code, param}, "message"}' };
  }
  const ok =
    b &&
    typeof b.error === 'string' &&
    Object.keys(b).every((k) => k === 'error' || k === 'code') &&
    (b.code === undefined || typeof b.code === 'string');
  return ok ? { message: b.error as string } : { shape: 'not {"error": "<message>", "code"}' };
}

/** Statuses the matrix met per operation, for the document's own list of responses. */
const refusalsMet = new Map<Operation, Set<number>>();

async function check(
  op: Operation,
  cred: Credential,
  filled: Filled,
  session: { jar: CookieJar; csrf: string },
) {
  const want = expected(op, cred, filled);
  const label = `${cred.name}:`;
  if ('undocumented' in want) return `${label} ${want.undocumented}`;
  const got = await send(op, cred, filled.path, session);
  const shown = `${got.status} ${got.text.slice(0, 300)}`;
  if ('pass' in want)
    return got.status === 401 || got.status === 403 ? `${label} expected to pass, got ${shown}` : undefined;
  (refusalsMet.get(op) ?? refusalsMet.set(op, new Set()).get(op)!).add('status' in want ? want.status : 404);
  if ('likeUnknown' in want) {
    const unknown = await send(op, cred, filled.unknown, session);
    let text = unknown.text;
    for (const [value, sibling] of filled.owned) text = text.split(sibling).join(value);
    if (got.status !== 404 || unknown.status !== 404 || got.text !== text)
      return `${label} expected the answer of an id that does not exist (404 ${text}), got ${shown}`;
    const m = messageOf(op.path, got.body);
    return 'shape' in m ? `${label} ${got.status}: the body is ${m.shape}: ${got.text}` : undefined;
  }
  if (got.status !== want.status) return `${label} expected ${want.status} ${want.message}, got ${shown}`;
  const m = messageOf(op.path, got.body);
  if ('shape' in m) return `${label} ${got.status}: the body is ${m.shape}: ${got.text}`;
  if (m.message !== want.message) return `${label} expected ${want.status} ${want.message}, got ${shown}`;
  return undefined;
}

/** At most `limit` cells at a time. */
async function inBatches<T, R>(items: T[], limit: number, run: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += limit)
    out.push(...(await Promise.all(items.slice(i, i + limit).map(run))));
  return out;
}

// Operations that delete run last (the /admin ones after the rest), so the owner's resources are
// there for every other cell; in each operation the refusals run before the owner's allowed calls.
const rank = (op: Operation) => (op.method !== 'delete' ? 0 : op.path.startsWith('/admin/') ? 2 : 1);
const ORDERED = [...OPERATIONS].sort((a, b) => rank(a) - rank(b));

describe('every operation of GET /openapi.json × every credential', () => {
  it('reads a document with operations to check', () => {
    expect(OPERATIONS.length).toBeGreaterThan(50);
  });

  for (const op of ORDERED)
    it(`${op.method.toUpperCase()} ${op.path}: every credential gets the answer its security requirement names`, async () => {
      const filled = fill(op);
      if (typeof filled === 'string') throw new Error(filled);
      const session = await ownerSession();
      const refusals = CREDENTIALS.filter((c) => !('pass' in expected(op, c, filled)));
      const passes = CREDENTIALS.filter((c) => 'pass' in expected(op, c, filled));
      const failures = [
        ...(await inBatches(refusals, 5, (c) => check(op, c, filled, session))),
        ...(await inBatches(passes, 5, (c) => check(op, c, filled, session))),
      ].filter((f): f is string => !!f);
      expect(failures, `${op.method.toUpperCase()} ${op.path}`).toEqual([]);
    });
});

describe('the document', () => {
  it('lists every refusal the matrix met among the operation’s responses, in the route family’s error shape', () => {
    const missing: string[] = [];
    for (const [op, statuses] of refusalsMet)
      for (const status of statuses) {
        const r = op.doc.responses[String(status)];
        const where = `${op.method.toUpperCase()} ${op.path} ${status}`;
        if (!r) {
          missing.push(`${where}: not documented`);
          continue;
        }
        const schema = r.content?.['application/json']?.schema;
        const documented =
          schema?.properties?.error?.type === 'object' ? 'openai' : schema ? 'simple' : 'none';
        if (documented !== familyOf(op.path))
          missing.push(
            `${where}: documented with the ${documented} error shape, answered in the ${familyOf(op.path)} one`,
          );
      }
    expect(missing).toEqual([]);
  });
});
