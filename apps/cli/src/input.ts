// A request body from a file (`-f FILE`, - for standard input): one YAML or JSON document, as the
// API takes it. Unreadable or unparsable files are usage errors (exit 2), like a bad manifest.
import { readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { ManifestError } from './apply.ts';

export function readDocument(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (err) {
    throw new ManifestError(`${file}: ${(err as Error).message}`);
  }
  const doc = parseDocument(text);
  if (doc.errors.length) throw new ManifestError(`${file}: ${doc.errors[0]!.message}`);
  const value: unknown = doc.toJS();
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new ManifestError(`${file}: expected one YAML or JSON object`);
  return value;
}
