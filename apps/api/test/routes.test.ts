// Routes.add(): one declaration gives the OpenAPI entry and the Express handler, with typed path
// parameters and a body validated when the handler reads it.
import type { AddressInfo } from 'node:net';
import express from 'express';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { DB_UNAVAILABLE_LOG_MS, errorHandler, jsonBody } from '../src/http/middleware.ts';
import { Routes } from '../src/http/routes.ts';
import { ApiDoc } from '../src/http/openapi.ts';

async function serve(register: (routes: Routes) => void) {
  const app = express();
  const doc = new ApiDoc();
  const router = express.Router();
  router.use(...jsonBody(1024));
  register(new Routes(router, doc, '/api'));
  app.use('/api', router);
  app.use(errorHandler(pino({ level: 'silent' })));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, doc, close: () => new Promise((r) => server.close(r)) };
}

describe('Routes.add', () => {
  it('registers the document entry and the handler from one path, with its parameters', async () => {
    const s = await serve((routes) =>
      routes.add(
        {
          method: 'post',
          path: '/api/things/{thing}/parts/{part}',
          tag: 't',
          auth: 'none',
          summary: 'Add a part',
          body: z.strictObject({ size: z.int().min(1, 'must be at least 1') }),
          responses: { 201: { description: 'ok' } },
        },
        ({ params, body, res }) => {
          res.status(201).json({ thing: params.thing, part: params.part, size: body().size });
        },
      ),
    );
    const ok = await fetch(`${s.url}/api/things/t1/parts/p2`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ size: 3 }),
    });
    expect(ok.status).toBe(201);
    expect(await ok.json()).toEqual({ thing: 't1', part: 'p2', size: 3 });
    const bad = await fetch(`${s.url}/api/things/t1/parts/p2`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ size: 0 }),
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({
      error: 'Invalid request body: size: must be at least 1',
      code: 'validation_error',
    });
    const entry = (s.doc.document('0') as { paths: Record<string, Record<string, Record<string, unknown>>> })
      .paths['/api/things/{thing}/parts/{part}']!.post!;
    expect(entry.parameters).toEqual([
      { name: 'thing', in: 'path', required: true, schema: { type: 'string' } },
      { name: 'part', in: 'path', required: true, schema: { type: 'string' } },
    ]);
    expect(entry.requestBody).toMatchObject({ required: true });
    await s.close();
  });

  it('validates the body only when the handler reads it, so its own checks may come first', async () => {
    const s = await serve((routes) =>
      routes.add(
        {
          method: 'post',
          path: '/api/guarded',
          tag: 't',
          auth: 'none',
          summary: 'Guarded',
          body: z.strictObject({ n: z.int() }),
          responses: { 200: { description: 'ok' } },
        },
        ({ req, body, res }) => {
          if (req.get('x-allowed') !== 'yes') return void res.status(403).json({ error: 'no' });
          res.json(body());
        },
      ),
    );
    const post = (headers: Record<string, string>) =>
      fetch(`${s.url}/api/guarded`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: '[]',
      });
    expect((await post({})).status).toBe(403);
    expect((await post({ 'x-allowed': 'yes' })).status).toBe(400);
    await s.close();
  });

  it('refuses a route outside its router’s mount point', () => {
    const routes = new Routes(express.Router(), new ApiDoc(), '/api');
    expect(() =>
      routes.add(
        { method: 'get', path: '/admin/x', tag: 't', auth: 'none', summary: 's', responses: {} },
        () => {},
      ),
    ).toThrow(/outside \/api/);
  });
});

describe('errorHandler', () => {
  it('logs requests refused for a lost database once per DB_UNAVAILABLE_LOG_MS, counting the rest', async () => {
    const lines: { msg: string; refusedSinceLastLine?: number }[] = [];
    const logger = pino(
      { level: 'warn' },
      { write: (l: string) => void lines.push(JSON.parse(l) as (typeof lines)[number]) },
    );
    let now = 1_000_000;
    const app = express();
    app.get('/x', () => {
      // How node-postgres reports a server that is not there.
      throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    });
    app.use(errorHandler(logger, () => now));
    const server = app.listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/x`;
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await fetch(url)).status);
    now += DB_UNAVAILABLE_LOG_MS;
    statuses.push((await fetch(url)).status);
    expect(statuses).toEqual([503, 503, 503, 503, 503, 503]);
    expect(lines.map((l) => [l.msg, l.refusedSinceLastLine])).toEqual([
      ['database unavailable', undefined],
      ['database unavailable', 4],
    ]);
    await new Promise((r) => server.close(r));
  });
});
