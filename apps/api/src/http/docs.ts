// GET /docs: the API reference rendered from the same OpenAPI document GET /openapi.json serves, by
// Swagger UI (swagger-ui-dist, served from our own origin: no CDN, no inline script).
import { createRequire } from 'node:module';
import path from 'node:path';
import express, { type Router } from 'express';

const require = createRequire(import.meta.url);
const assets = path.dirname(require.resolve('swagger-ui-dist/package.json'));

const page = `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Berth API reference</title>
    <link rel="stylesheet" href="/docs/swagger-ui.css" />
    <link rel="icon" type="image/png" href="/docs/favicon-32x32.png" sizes="32x32" />
  </head>
  <body>
    <div id="swagger-ui"><noscript>The rendered reference needs JavaScript; the document itself is at <a href="/openapi.json">/openapi.json</a>.</noscript></div>
    <script src="/docs/swagger-ui-bundle.js"></script>
    <script src="/docs/init.js"></script>
  </body>
</html>
`;

const init = `window.ui = SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  tryItOutEnabled: false,
  validatorUrl: null,
});
`;

export function docsApp(): Router {
  const router = express.Router();
  const html = (_req: express.Request, res: express.Response) => {
    res.setHeader('cache-control', 'no-cache');
    res.type('html').send(page);
  };
  router.get('/docs', html);
  router.get('/docs/', html);
  router.get('/docs/init.js', (_req, res) => {
    res.setHeader('cache-control', 'no-cache');
    res.type('text/javascript').send(init);
  });
  for (const file of ['swagger-ui.css', 'swagger-ui-bundle.js', 'favicon-32x32.png', 'favicon-16x16.png'])
    router.get(`/docs/${file}`, (_req, res) => res.sendFile(path.join(assets, file), { maxAge: '1d' }));
  return router;
}
