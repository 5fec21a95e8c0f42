// CounterCells and HistogramCells (src/metrics.ts): hot-path increments kept in cells must expose
// exactly what direct prom-client calls would have.
import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CounterCells, HistogramCells } from '../src/platform/metrics.ts';

function pair() {
  const direct = new Registry();
  const viaCells = new Registry();
  const labelNames = ['route', 'method', 'status'] as const;
  const plain = new Counter({ name: 'c', help: 'h', labelNames, registers: [direct] });
  const counted = new Counter({
    name: 'c',
    help: 'h',
    labelNames,
    registers: [viaCells],
    collect: (): void => cells.flush(),
  });
  const cells = new CounterCells(counted, 3);
  return { direct, viaCells, plain, cells };
}

describe('CounterCells', () => {
  it('exposes what inc() would have, across scrapes, zero increments included', async () => {
    const { direct, viaCells, plain, cells } = pair();
    const calls: [string, string, number, number][] = [
      ['/api/d/:id/chat/completions', 'POST', 200, 1],
      ['/api/d/:id/chat/completions', 'POST', 200, 1],
      ['/api/d/:id/chat/completions', 'POST', 404, 1],
      ['/api/keys', 'GET', 200, 0],
      ['/api/d/:id/models', 'GET', 200, 2.5],
    ];
    for (const [route, method, status, by] of calls) {
      plain.inc({ route, method, status: String(status) }, by);
      cells.add(by, route, method, status);
    }
    expect(await viaCells.metrics()).toBe(await direct.metrics());
    expect(await viaCells.metrics()).toContain('c{route="/api/keys",method="GET",status="200"} 0');
    // Counted after a scrape: added once, at the next one.
    plain.inc({ route: '/api/keys', method: 'GET', status: '200' }, 3);
    cells.add(3, '/api/keys', 'GET', 200);
    expect(await viaCells.metrics()).toBe(await direct.metrics());
    expect(await viaCells.metrics()).toBe(await direct.metrics());
  });

  it('refuses a label count that is not the counter’s', () => {
    const c = new Counter({ name: 'd', help: 'h', labelNames: ['a', 'b'], registers: [] });
    expect(() => new CounterCells(c, 1)).toThrow('CounterCells: 1 labels, not 2');
  });
});

describe('HistogramCells', () => {
  const config = {
    name: 'berth_http_request_duration_seconds',
    help: 'Time to the end of the response, by route template and method',
    labelNames: ['route', 'method'] as [string, string],
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600],
  };

  it('exposes what a prom-client Histogram with the same observations does, text and JSON', async () => {
    const direct = new Registry();
    const viaCells = new Registry();
    const plain = new Histogram({ ...config, registers: [direct] });
    const cells = new HistogramCells(config, viaCells);
    expect(await viaCells.metrics()).toBe(await direct.metrics()); // nothing observed yet
    const calls: [number, string, string][] = [
      [0.0004, '/api/d/:id/chat/completions', 'POST'],
      [0.001, '/api/d/:id/chat/completions', 'POST'], // on a bound: counted in it (le)
      [0.0031, '/api/d/:id/chat/completions', 'POST'],
      [2.5, '/api/keys', 'GET'],
      [900, '/api/keys', 'GET'], // above every bound: only +Inf
      [0, '/api/d/:id/models', 'GET'],
    ];
    for (const [value, route, method] of calls) {
      plain.observe({ route, method }, value);
      cells.observe(value, route, method);
    }
    expect(await viaCells.metrics()).toBe(await direct.metrics());
    expect(await viaCells.metrics()).toContain(
      'berth_http_request_duration_seconds_bucket{le="0.001",route="/api/d/:id/chat/completions",method="POST"} 2',
    );
    expect(await viaCells.getMetricsAsJSON()).toEqual(await direct.getMetricsAsJSON());
    plain.observe({ route: '/api/keys', method: 'GET' }, 0.02);
    cells.observe(0.02, '/api/keys', 'GET');
    expect(await viaCells.metrics()).toBe(await direct.metrics());
    direct.resetMetrics();
    viaCells.resetMetrics();
    expect(await viaCells.metrics()).toBe(await direct.metrics());
  });

  it('refuses a value that is not a finite number, as prom-client does', () => {
    const cells = new HistogramCells(config);
    expect(() => cells.observe(Number.NaN, 'r', 'GET')).toThrow('Value is not a valid number: NaN');
  });
});
