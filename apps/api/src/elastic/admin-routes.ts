// The catalog's admin API (ADMIN_TOKEN): create, replace, list, read and remove Elastic catalog
// models.
import { z } from 'zod';
import { ApiError } from '../platform/errors.ts';
import type { Routes } from '../http/routes.ts';
import type { ElasticCatalog } from './catalog.ts';
import { adminModel, adminView, entryBody, modelName } from './entry.ts';

export function registerCatalogAdminRoutes(routes: Routes, deps: { catalog: ElasticCatalog }): void {
  const modelByName = (name: string) => {
    const m = deps.catalog.get(name);
    if (!m) throw new ApiError('not_found', { message: `Catalog model ${name} not found` });
    return m;
  };
  routes.add(
    {
      method: 'put',
      path: '/admin/models/{name}',
      tag: 'admin',
      auth: 'admin',
      summary: 'Create or replace an Elastic catalog model',
      body: entryBody,
      responses: {
        200: { description: 'Replaced', schema: adminModel },
        201: { description: 'Created', schema: adminModel },
        400: { description: 'Invalid entry; the message names the field' },
      },
    },
    async ({ res, params, body }) => {
      const checked = modelName.safeParse(params.name);
      if (!checked.success)
        throw new ApiError('validation_error', {
          message: `Invalid model name: ${checked.error.issues[0]!.message}`,
          param: 'name',
        });
      const name = checked.data;
      const created = await deps.catalog.put(name, body());
      res.status(created ? 201 : 200).json(adminView(modelByName(name)));
    },
  );
  routes.add(
    {
      method: 'get',
      path: '/admin/models',
      tag: 'admin',
      auth: 'admin',
      summary: 'The Elastic catalog (secrets shown as "set")',
      responses: { 200: { description: 'Every model', schema: z.object({ data: z.array(adminModel) }) } },
    },
    ({ res }) => {
      res.json({ data: deps.catalog.list().map(adminView) });
    },
  );
  routes.add(
    {
      method: 'get',
      path: '/admin/models/{name}',
      tag: 'admin',
      auth: 'admin',
      summary: 'One Elastic catalog model',
      responses: {
        200: { description: 'The model', schema: adminModel },
        404: { description: 'No such model' },
      },
    },
    ({ res, params }) => {
      res.json(adminView(modelByName(params.name)));
    },
  );
  routes.add(
    {
      method: 'delete',
      path: '/admin/models/{name}',
      tag: 'admin',
      auth: 'admin',
      summary: 'Remove an Elastic catalog model',
      responses: {
        204: { description: 'Removed' },
        404: { description: 'No such model' },
        409: { description: 'Another model falls back to it' },
      },
    },
    async ({ res, params }) => {
      if (!(await deps.catalog.delete(params.name)))
        throw new ApiError('not_found', { message: `Catalog model ${params.name} not found` });
      res.status(204).end();
    },
  );
}
