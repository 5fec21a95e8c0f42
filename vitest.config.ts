import { defineConfig } from 'vitest/config';

// Two projects: `unit` (pure logic, *.test.ts) and `integration` (*.int.test.ts, real Postgres and a
// real Kubernetes API server). `npm test` runs both.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['**/*.test.ts'],
          exclude: ['**/node_modules/**', '**/*.int.test.ts'],
        },
      },
      {
        test: {
          name: 'integration',
          include: ['**/*.int.test.ts'],
          globalSetup: ['./test/cluster/global-setup.ts'],
          exclude: ['**/node_modules/**'],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
