import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { loadCatalog } from './catalog.ts';
import { renderCrdYaml } from './crd.ts';

// Usage: npm run generate -w crds [-- --catalog <file> --out <file>]
const { values } = parseArgs({ options: { catalog: { type: 'string' }, out: { type: 'string' } } });
const out =
  values.out ?? fileURLToPath(new URL('../generated/berth.dev_dedicatedendpoints.yaml', import.meta.url));
writeFileSync(out, renderCrdYaml(loadCatalog(values.catalog)));
console.error(`wrote ${out}`);
