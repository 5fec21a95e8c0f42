// Every variable the API reads is in a configuration table a user can find: a knob a test (or an
// operator) needs is a documented one, named in the first column of a table row of README.md or a
// manual in docs/.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { configSchema } from '../src/platform/config.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

function documentedVariables(): Set<string> {
  const files = [
    path.join(root, 'README.md'),
    ...readdirSync(path.join(root, 'docs'), { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.md'))
      .map((f) => path.join(root, 'docs', f)),
  ];
  const names = new Set<string>();
  for (const file of files)
    for (const m of readFileSync(file, 'utf8').matchAll(/^\|\s*((?:`[A-Z][A-Z0-9_]*`(?:\s*\/\s*)?)+)\s*\|/gm))
      for (const name of m[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)) names.add(name[1]!);
  return names;
}

describe('configuration', () => {
  it('every variable of the configuration schema has a row in a documented configuration table', () => {
    const documented = documentedVariables();
    const missing = Object.keys(configSchema.shape).filter((k) => !documented.has(k));
    expect(missing).toEqual([]);
  });
});
