// The generated OpenAPI document (apps/api/generated) is what the CLI's client and the dashboard are
// typed from: it must be the document the routes describe today, with an operationId on every
// operation. Regenerate with `npm run openapi -w @berth/api`.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import { describe, expect, it } from 'vitest';
import { openapiDocument } from '../src/openapi-document.ts';
import { operationIdOf } from '../src/http/openapi.ts';

const dir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../generated');
const document = JSON.parse(JSON.stringify(openapiDocument())) as {
  info: { license: { identifier: string } };
  servers: { url: string }[];
  paths: Record<string, Record<string, { operationId: string }>>;
};

describe('generated OpenAPI document', () => {
  it('is up to date (run `npm run openapi -w @berth/api` after changing a route)', () => {
    const file = JSON.parse(readFileSync(path.join(dir, 'openapi.json'), 'utf8'));
    expect(file).toEqual(document);
  });

  it('its TypeScript types are up to date', async () => {
    const types = readFileSync(path.join(dir, 'openapi.d.ts'), 'utf8');
    expect(types.slice(types.indexOf('\n') + 1)).toBe(astToString(await openapiTS(document as never)));
  }, 60_000);

  it('has servers, a license and a unique operationId on every operation', () => {
    expect(document.servers).toEqual([{ url: '/', description: 'This Berth API' }]);
    expect(document.info.license.identifier).toBe('Apache-2.0');
    const ids = Object.values(document.paths).flatMap((ops) => Object.values(ops).map((o) => o.operationId));
    expect(ids.length).toBeGreaterThan(30);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toContain('putEndpointsById');
  });

  it('operation ids: verb, words of the path, parameters as By<Name>', () => {
    expect(operationIdOf('get', '/api/endpoints/{id}/logs')).toBe('getEndpointsByIdLogs');
    expect(operationIdOf('post', '/api/d/{id}/chat/completions')).toBe('postDByIdChatCompletions');
    expect(operationIdOf('get', '/openapi.json')).toBe('getOpenapiJson');
  });
});
