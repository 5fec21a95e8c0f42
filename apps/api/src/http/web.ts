// The dashboard (apps/web's static build) on the API's own origin: its files, and index.html for
// the dashboard's own paths (client-side routing), with the pages' security headers (same origin
// only, never framed: ./middleware.ts pageHeaders). API paths never fall back to it.
import { existsSync } from 'node:fs';
import path from 'node:path';
import express, { type RequestHandler } from 'express';
import { pageHeaders } from './middleware.ts';

const API_PATHS = /^\/(api|admin|auth|idp|openapi\.json|docs|metrics|healthz|readyz)(\/|$)/;

export function webApp(dir: string): RequestHandler {
  const index = path.join(dir, 'index.html');
  const router = express.Router();
  if (!existsSync(index)) return router;
  const headers = pageHeaders();
  router.use((req, res, next) => (API_PATHS.test(req.path) ? next() : headers(req, res, next)));
  // Hashed asset names: cached for good; index.html always revalidated.
  router.use('/assets', express.static(path.join(dir, 'assets'), { immutable: true, maxAge: '365d' }));
  router.use(express.static(dir, { index: false, maxAge: 0 }));
  router.get(/.*/, (req, res, next) => {
    // A missing file (`/assets/x.js`) is a 404, not the page.
    if (API_PATHS.test(req.path) || path.extname(req.path) || !req.accepts('html')) return next();
    res.setHeader('cache-control', 'no-cache');
    res.sendFile(index);
  });
  return router;
}
