import { describe, expect, it } from 'vitest';
import { crashLoop, fatalExit, lastLines } from '../src/local/exits.ts';
import { withAddress } from '../src/local/supervisor.ts';

describe('local engine exits', () => {
  it('CUDA out of memory is OutOfMemory (→ ModelTooLarge), with the output', () => {
    const f = fatalExit({
      code: 1,
      signal: null,
      tail: 'INFO loading\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB.\n',
    });
    expect(f?.kind).toBe('OutOfMemory');
    expect(f?.message).toMatch(
      /\(exit code 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB.\)/,
    );
  });

  it('a gated repository is GatedModel (→ GatedModelNoToken)', () => {
    const f = fatalExit({
      code: 1,
      signal: null,
      tail: 'huggingface_hub.errors.GatedRepoError: 401 Client Error.\nCannot access gated repo for url …',
    });
    expect(f?.kind).toBe('GatedModel');
  });

  it('anything else is not fatal by itself; after the restarts it is a CrashLoop', () => {
    const exit = { code: null, signal: 'SIGSEGV' as const, tail: 'boom\n' };
    expect(fatalExit(exit)).toBeUndefined();
    expect(crashLoop(exit, 3)).toEqual({
      kind: 'CrashLoop',
      message: 'The engine process keeps exiting (3 restarts, killed by SIGSEGV: boom).',
    });
  });

  it('keeps the last lines, bounded', () => {
    expect(lastLines('a\n\nb\nc\nd\ne\nf\n')).toBe('b\nc\nd\ne\nf');
    expect(lastLines('x'.repeat(1000), 5, 10)).toBe('…xxxxxxxxxx');
  });
});

describe('engine arguments', () => {
  it('replaces the pod bind address with the local one', () => {
    expect(
      withAddress(['m', '--host', '0.0.0.0', '--port', '8000', '--revision', 'main'], '127.0.0.1', 4321),
    ).toEqual(['m', '--host', '127.0.0.1', '--port', '4321', '--revision', 'main']);
    expect(withAddress(['m'], '127.0.0.1', 1)).toEqual(['m', '--host', '127.0.0.1', '--port', '1']);
  });
});
