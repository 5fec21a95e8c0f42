// The one HTTP client of the CLI, typed from the API's generated OpenAPI document
// (apps/api/generated/openapi.d.ts): a path that does not exist there, or a body of the wrong shape,
// does not compile. Errors are the API's own message, never a stack trace.
import type { components, paths } from '../../api/generated/openapi.d.ts';

export type Endpoint = paths['/api/endpoints/{id}']['get']['responses'][200]['content']['application/json'];
export type EndpointBody = paths['/api/endpoints/{id}']['put']['requestBody']['content']['application/json'];
export type Whoami = paths['/api/whoami']['get']['responses'][200]['content']['application/json'];
export type { components };

export class ApiFailure extends Error {
  readonly status: number;
  readonly code: string | undefined;
  constructor(status: number, message: string, code?: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
/** A path template of the document with its parameters filled in, checked against `paths`. */
type PathOf<M extends Method> = {
  [P in keyof paths]: paths[P] extends Record<M, unknown> ? P : never;
}[keyof paths];
/** The JSON a successful call of `method path` answers (its 200, 201 or 202 body). */
export type ResponseOf<M extends Method, P extends PathOf<M>> = Ok<M, P>;
type Ok<M extends Method, P extends PathOf<M>> = paths[P][M] extends {
  responses: infer R;
}
  ? R extends { 200: { content: { 'application/json': infer B } } }
    ? B
    : R extends { 201: { content: { 'application/json': infer B } } }
      ? B
      : R extends { 202: { content: { 'application/json': infer B } } }
        ? B
        : unknown
  : unknown;
/** The JSON body `method path` takes. */
export type RequestOf<M extends Method, P extends PathOf<M>> = BodyOf<M, P>;
type BodyOf<M extends Method, P extends PathOf<M>> = paths[P][M] extends {
  requestBody: { content: { 'application/json': infer B } };
}
  ? B
  : paths[P][M] extends { requestBody?: { content: { 'application/json': infer B } } }
    ? B
    : never;

/** The list routes that answer a page: `{"object": "list", "data", "has_more", "first_id", "last_id"}`. */
type ListPath = {
  [P in PathOf<'get'>]: Ok<'get', P> extends { object: 'list'; has_more: boolean } ? P : never;
}[PathOf<'get'>];
type ListItem<P extends ListPath> = Ok<'get', P> extends { data: (infer T)[] } ? T : never;

export class Client {
  readonly baseUrl: string;
  readonly #key: string | undefined;
  constructor(baseUrl: string, key: string | undefined) {
    this.baseUrl = baseUrl;
    this.#key = key;
  }

  async call<M extends Method, P extends PathOf<M>>(
    method: M,
    path: P,
    options: {
      params?: Record<string, string>;
      query?: Record<string, string>;
      body?: BodyOf<M, P>;
      headers?: Record<string, string>;
    } = {},
  ): Promise<{ status: number; data: Ok<M, P>; headers: Headers }> {
    const query = options.query ? `?${new URLSearchParams(options.query)}` : '';
    const res = await this.raw(method, fill(path, options.params) + query, options.body, options.headers);
    const text = await res.text();
    const data = text ? (JSON.parse(text) as Ok<M, P>) : (undefined as Ok<M, P>);
    return { status: res.status, data, headers: res.headers };
  }

  /**
   * Every item of a paged list route: page after page, each asking for the items after the last
   * one it got (`after` = the previous page's `last_id`) until `has_more` is false.
   */
  async listAll<P extends ListPath>(path: P): Promise<ListItem<P>[]> {
    const items: ListItem<P>[] = [];
    let after: string | null = null;
    do {
      const query: string = after ? `?after=${encodeURIComponent(after)}` : '';
      const res = await this.raw('get', path + query);
      const page = (await res.json()) as { data: ListItem<P>[]; has_more?: boolean; last_id?: string | null };
      items.push(...page.data);
      after = page.has_more ? (page.last_id ?? null) : null;
    } while (after);
    return items;
  }

  /** The response as it comes (for streams); non-2xx become ApiFailure. */
  async raw(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(this.baseUrl.replace(/\/$/, '') + path, {
        method: method.toUpperCase(),
        headers: {
          ...(this.#key ? { authorization: `Bearer ${this.#key}` } : {}),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new ApiFailure(
        0,
        `Cannot reach ${this.baseUrl}: ${cause?.code ?? cause?.message ?? String(err)}`,
      );
    }
    if (!res.ok) {
      const text = await res.text();
      let message = `HTTP ${res.status}`;
      let code: string | undefined;
      try {
        const e = JSON.parse(text) as { error?: string | { message?: string; code?: string }; code?: string };
        if (typeof e.error === 'string') message = e.error;
        else if (e.error?.message) message = e.error.message;
        code = typeof e.error === 'object' ? e.error.code : e.code;
      } catch {
        if (text) message = `HTTP ${res.status}: ${text.slice(0, 200)}`;
      }
      throw new ApiFailure(res.status, message, code);
    }
    return res;
  }
}

function fill(path: string, params: Record<string, string> = {}): string {
  return path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const v = params[name];
    if (v === undefined) throw new Error(`missing path parameter ${name}`);
    return encodeURIComponent(v);
  });
}
