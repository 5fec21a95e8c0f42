import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createApp } from '../src/app.ts';
import { parseConfig } from '../src/platform/config.ts';
import type { KeyService } from '../src/accounts/keys/service.ts';
import { createMetrics } from '../src/platform/metrics.ts';

describe('an unexpected failure', () => {
  it('is a 500 Internal Server Error with no stack trace or cause in the body', async () => {
    const keys = {
      verify: async () => {
        throw new Error('connection to 10.1.2.3 refused at Socket.connect (net.js:1)');
      },
    } as unknown as KeyService;
    const app = createApp({
      config: parseConfig({ MAX_BODY_BYTES: '1024' }),
      adminToken: 'a'.repeat(20),
      keys,
      health: { ping: async () => {} },
      metrics: createMetrics(),
      logger: pino({ level: 'silent' }),
      lifecycle: { shuttingDown: false },
    });
    const server = app.listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    const { port } = server.address() as AddressInfo;
    try {
      const res = await fetch(`http://127.0.0.1:${port}/api/keys`, {
        headers: { authorization: `Bearer svc_live_${'a'.repeat(33)}` },
      });
      expect(res.status).toBe(500);
      const text = await res.text();
      expect(JSON.parse(text)).toEqual({ error: 'Internal Server Error', code: 'internal_error' });
      expect(text).not.toMatch(/10\.1\.2\.3|at |Socket/);
    } finally {
      server.close();
    }
  });
});
