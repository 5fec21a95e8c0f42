import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// Built to dist/, which the API serves at / (same origin as /api and /auth). `npm run dev -w
// @berth/web` proxies those paths to an API on localhost:8080.
export default defineConfig({
  plugins: [react()],
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false },
  server: {
    proxy: Object.fromEntries(['/api', '/auth', '/idp'].map((p) => [p, 'http://localhost:8080'])),
  },
});
