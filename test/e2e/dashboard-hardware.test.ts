// The dashboard's create form starts on the cheapest hardware: by price when GET /api/hardware
// carries one, by GPU memory when it does not (the browser suite sees the API of the day; these are
// both shapes of its answer).
import { describe, expect, it } from 'vitest';
import type { Hardware } from '../../apps/web/src/api.ts';
import { cheapestChoice, hardwareName } from '../../apps/web/src/hardware.ts';

const type = (id: string, gpuMemoryGiB: number, extra: Record<string, unknown> = {}): Hardware =>
  ({
    id,
    displayName: id.toUpperCase(),
    gpuType: id.toUpperCase(),
    gpuMemoryGiB,
    allowedGpuCounts: [1, 2, 4],
    available: true,
    ...extra,
  }) as Hardware;

describe('the create form’s default hardware', () => {
  it('without prices: the smallest GPU, one of it, however the catalog is ordered', () => {
    expect(cheapestChoice([type('h100', 80), type('a100', 80), type('l4', 24)])).toBe('l4|1');
    expect(cheapestChoice([type('l4', 24), type('h100', 80)])).toBe('l4|1');
  });

  it('with prices: the cheapest GPU hour, even when it is not the smallest GPU', () => {
    const prices = { h100: '2.50', a100: '0.60', l4: '0.80' };
    const catalog = [
      type('h100', 80, { pricePerGpuHour: prices.h100 }),
      type('a100', 80, { pricePerGpuHour: prices.a100 }),
      type('l4', 24, { pricePerGpuHour: prices.l4 }),
    ];
    expect(cheapestChoice(catalog)).toBe('a100|1');
    // Compared exactly, in micro-units: 0.000001 apart is apart.
    expect(
      cheapestChoice([
        type('a', 80, { pricePerGpuHour: '0.600001' }),
        type('b', 80, { pricePerGpuHour: '0.600000' }),
      ]),
    ).toBe('b|1');
  });

  it('a catalog that names no price (every type at "0.000000"): memory decides', () => {
    const free = { pricePerGpuHour: '0.000000' };
    expect(cheapestChoice([type('h100', 80, free), type('l4', 24, free), type('a100', 80, free)])).toBe(
      'l4|1',
    );
  });

  it('prices on some types only: memory decides, as without prices', () => {
    expect(cheapestChoice([type('a100', 80, { pricePerGpuHour: '0.10' }), type('l4', 24)])).toBe('l4|1');
  });

  it('never an unavailable type; nothing when none is available', () => {
    expect(cheapestChoice([type('l4', 24, { available: false }), type('h100', 80)])).toBe('h100|1');
    expect(cheapestChoice([type('l4', 24, { available: false })])).toBeUndefined();
    expect(cheapestChoice([type('l4', 24, { allowedGpuCounts: [2, 4] })])).toBe('l4|2');
  });

  it('names hardware by its display name, and by id when the catalog does not list it', () => {
    expect(hardwareName([type('l4', 24)], 'l4')).toBe('L4');
    expect(hardwareName([type('l4', 24)], 'gone')).toBe('gone');
    expect(hardwareName(null, 'l4')).toBe('l4');
  });
});
