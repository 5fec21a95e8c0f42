// CounterCells (src/metrics.ts): hot-path increments kept in cells and added to the prom-client
// counter when it is collected must expose exactly what direct inc() calls would have.
import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CounterCells } from '../src/metrics.ts';

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
