import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

// A stand-in for the Hugging Face hub API, answering the two calls the operator's preflight makes:
//   GET  /api/models/{org}/{name}                  -> { id, gated, safetensors: { parameters, total } }
//   HEAD /{org}/{name}/resolve/{revision}/config.json -> 200 with access, 401 without a token, 403 without access
// As on the real hub, a private or missing model answers 401 without a token and 404 with one.
// And the download an engine makes (the engine simulator fetches this one file when its node's cache
// lacks the model), counted per model:
//   GET  /{org}/{name}/resolve/{revision}/model.safetensors -> 200 and WEIGHTS_BYTES bytes

export interface FakeModel {
  gated?: false | 'auto' | 'manual';
  parameters?: Record<string, number>;
  /** Tokens allowed to read a gated model's files. */
  tokens?: string[];
}

export const FAKE_MODELS: Record<string, FakeModel> = {
  'org/small': { parameters: { BF16: 500_000_000 } },
  'org/huge': { parameters: { BF16: 405_000_000_000 } },
  // ≈ 37 GiB of weights: too large for one 24 GiB GPU, fits one 80 GiB GPU.
  'org/mid': { parameters: { BF16: 20_000_000_000 } },
  'org/gated': { gated: 'manual', parameters: { BF16: 8_000_000_000 }, tokens: ['hf_good'] },
  'org/unknown-size': {},
};

/** The size of a fake weights file. */
export const WEIGHTS_BYTES = 64 * 1024;

export async function startFakeHub(models: Record<string, FakeModel> = FAKE_MODELS) {
  const requests: string[] = [];
  const downloads = new Map<string, number>();
  let down = false;
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://hub');
    requests.push(`${req.method} ${url.pathname}`);
    if (down) return void res.writeHead(503).end();
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    const info = /^\/api\/models\/([^/]+\/[^/]+)$/.exec(url.pathname);
    if (req.method === 'GET' && info) {
      const m = models[info[1]!];
      if (!m)
        return void res
          .writeHead(token ? 404 : 401, { 'content-type': 'application/json' })
          .end('{"error":"Repository not found"}');
      const total = Object.values(m.parameters ?? {}).reduce((a, b) => a + b, 0);
      const body = {
        id: info[1],
        gated: m.gated ?? false,
        ...(m.parameters ? { safetensors: { parameters: m.parameters, total } } : {}),
      };
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    }
    const weights = /^\/([^/]+\/[^/]+)\/resolve\/[^/]+\/model\.safetensors$/.exec(url.pathname);
    if (req.method === 'GET' && weights) {
      const m = models[weights[1]!];
      if (!m) return void res.writeHead(404).end();
      if (m.gated && !m.tokens?.includes(token ?? '')) return void res.writeHead(token ? 403 : 401).end();
      downloads.set(weights[1]!, (downloads.get(weights[1]!) ?? 0) + 1);
      return void res
        .writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': WEIGHTS_BYTES })
        .end(Buffer.alloc(WEIGHTS_BYTES));
    }
    const file = /^\/([^/]+\/[^/]+)\/resolve\/[^/]+\/config\.json$/.exec(url.pathname);
    if (req.method === 'HEAD' && file) {
      const m = models[file[1]!];
      if (!m) return void res.writeHead(404).end();
      if (!m.gated) return void res.writeHead(200).end();
      if (!token) return void res.writeHead(401, { 'x-error-code': 'GatedRepo' }).end();
      return void res
        .writeHead(
          m.tokens?.includes(token) ? 200 : 403,
          m.tokens?.includes(token) ? {} : { 'x-error-code': 'GatedRepo' },
        )
        .end();
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    /** Weights downloads of a model (GETs of its model.safetensors answered 200). */
    downloads: (model: string) => downloads.get(model) ?? 0,
    setDown: (v: boolean) => {
      down = v;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
