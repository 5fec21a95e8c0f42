import { DEFAULT_CATALOG } from '@berth/crds';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { reconcilerConfig, reconcilerEnv } from '../src/core/config.ts';
import { startController, type ControlledRuntime } from '../src/core/controller.ts';

const config = reconcilerConfig(reconcilerEnv.parse({}));
const log = pino({ level: 'silent' });

/** A runtime holding no endpoints: every pass finds nothing, so `gone` is told of each key. */
function emptyRuntime(keys: string[], events: string[]): ControlledRuntime {
  return {
    store: {
      get: (key) => {
        events.push(`get ${key}`);
        return undefined;
      },
      writeStatus: async () => {},
      setFinalizer: async () => {},
      recordEvent: async () => {},
    },
    driver: {
      observe: async () => ({ replicas: 0, readyReplicas: 0 }),
      apply: async () => {},
      url: () => '',
      hubToken: async () => ({ kind: 'none' }),
      checkSource: async () => ({ kind: 'passed' as const }),
    },
    keys: () => keys,
    start: async () => {
      events.push('start');
    },
    stop: async () => {
      events.push('stop');
    },
    gone: async (key) => {
      events.push(`gone ${key}`);
    },
  };
}

const settle = () => new Promise((r) => setTimeout(r, 20));

describe('the controller loop', () => {
  it('holds keys the runtime enqueues while it is being built, then reconciles them', async () => {
    const events: string[] = [];
    const c = startController({ config, catalog: DEFAULT_CATALOG, log }, (enqueue) => {
      enqueue('ns/early');
      events.push('built');
      return emptyRuntime([], events);
    });
    await settle();
    expect(events[0]).toBe('built');
    expect(events).toContain('gone ns/early');
    await c.stop();
  });

  it('reconciles every key once the runtime has started, and tells it of keys with no endpoint', async () => {
    const events: string[] = [];
    const c = startController({ config, catalog: DEFAULT_CATALOG, log }, () =>
      emptyRuntime(['ns/a', 'ns/b'], events),
    );
    await settle();
    expect(c.synced).toBe(true);
    expect(events.filter((e) => e.startsWith('gone')).sort()).toEqual(['gone ns/a', 'gone ns/b']);
    await c.stop();
    expect(events.at(-1)).toBe('stop');
  });

  it('reports each outcome and logs nothing for a clean pass', async () => {
    const outcomes: string[] = [];
    const c = startController(
      { config, catalog: DEFAULT_CATALOG, log, observer: { outcome: (o) => outcomes.push(o) } },
      () => emptyRuntime(['ns/a'], []),
    );
    await settle();
    expect(outcomes).toEqual(['success']);
    await c.stop();
  });
});
