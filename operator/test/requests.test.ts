import { once } from 'node:events';
import type { IncomingMessage } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorText } from '../src/core/error-text.ts';
import { reuseConnections } from '../src/k8s/connections.ts';
import { endpointPath, KubeApiError, KubeRequests, microTime, resourcePath } from '../src/k8s/requests.ts';

// The operator's own request path (requests.ts) against a plain HTTP server standing in for the API
// server: what goes on the wire (method, path, query, headers, body) and how answers and refusals
// come back. The integration tests run the same path against a real API server.

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}
const seen: Seen[] = [];
let answer: { status: number; body: string } = { status: 200, body: '{}' };
const server = createServer((req, res) => {
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (c: string) => (body += c));
  req.on('end', () => {
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
    res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body);
  });
});
let kc: KubeConfig;

beforeAll(async () => {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${port}/prefix/`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'sekret' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  reuseConnections(kc);
});
afterAll(() => server.close());

describe('KubeRequests', () => {
  it('applies an object: PATCH with the apply content type, field manager and force, bearer token, JSON body', async () => {
    answer = { status: 200, body: '{"kind":"Service","metadata":{"name":"s","resourceVersion":"7"}}' };
    const obj = { apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'ns 1' } };
    const got = await new KubeRequests(kc).apply(resourcePath('v1', 'Service', 'ns 1', 's'), obj, 'berth-op');
    expect(got).toEqual({ kind: 'Service', metadata: { name: 's', resourceVersion: '7' } });
    const req = seen.at(-1)!;
    expect(req.method).toBe('PATCH');
    expect(req.url).toBe('/prefix/api/v1/namespaces/ns%201/services/s?fieldManager=berth-op&force=true');
    expect(req.headers['content-type']).toBe('application/apply-patch+yaml');
    expect(req.headers.authorization).toBe('Bearer sekret');
    expect(req.headers.accept).toBe('application/json');
    expect(JSON.parse(req.body)).toEqual(obj);
  });

  it('a refusal rejects with the HTTP code and the Status body, which errorText reads', async () => {
    answer = {
      status: 404,
      body: '{"kind":"Status","status":"Failure","message":"dedicatedendpoints.berth.dev \\"endpt-x\\" not found","code":404}',
    };
    const err = await new KubeRequests(kc)
      .send('PATCH', endpointPath('ns', 'endpt-x', 'status'), { status: {} }, 'application/merge-patch+json')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KubeApiError);
    expect((err as KubeApiError).code).toBe(404);
    expect(errorText(err)).toBe('HTTP 404: dedicatedendpoints.berth.dev "endpt-x" not found');
    expect(seen.at(-1)!.url).toBe(
      '/prefix/apis/berth.dev/v1alpha1/namespaces/ns/dedicatedendpoints/endpt-x/status',
    );
  });

  it('a request without a body sends no content type; an empty answer resolves to undefined', async () => {
    answer = { status: 200, body: '' };
    await expect(
      new KubeRequests(kc).send('DELETE', resourcePath('apps/v1', 'Deployment', 'ns', 'd')),
    ).resolves.toBeUndefined();
    const req = seen.at(-1)!;
    expect(req.method).toBe('DELETE');
    expect(req.url).toBe('/prefix/apis/apps/v1/namespaces/ns/deployments/d');
    expect(req.headers['content-type']).toBeUndefined();
    expect(req.body).toBe('');
  });

  it('knows the paths of the kinds the operator writes, and refuses to guess others', () => {
    expect(resourcePath('events.k8s.io/v1', 'Event', 'ns')).toBe(
      '/apis/events.k8s.io/v1/namespaces/ns/events',
    );
    expect(resourcePath('v1', 'PersistentVolumeClaim', 'ns', 'c')).toBe(
      '/api/v1/namespaces/ns/persistentvolumeclaims/c',
    );
    expect(() => resourcePath('v1', 'Secret', 'ns', 's')).toThrow('no REST path known for v1 Secret');
  });

  it('writes MicroTime with microseconds', () => {
    expect(microTime(new Date('2026-11-24T02:40:00.123Z'))).toBe('2026-11-24T02:40:00.123000Z');
  });
});
