export * from './constants.ts';
export * from './id.ts';
export * from './schema.ts';
export * from './catalog.ts';
export { buildCrd, openApiSchema, renderCrdYaml, toStructural } from './crd.ts';
