import { stringify } from 'yaml';
import { z } from 'zod';
import type { Catalog } from './catalog.ts';
import { DEFAULT_CATALOG } from './catalog.ts';
import {
  API_VERSION,
  CRD_NAME,
  ENDPOINT_ID_PREFIX,
  GROUP,
  KIND,
  LIST_KIND,
  PLURAL,
  SHORT_NAMES,
  SINGULAR,
  VERSION,
} from './constants.ts';
import { ENDPOINT_ID_MAX_LENGTH } from './id.ts';
import { DedicatedEndpointSpecSchema, DedicatedEndpointStatusSchema } from './schema.ts';

// Why the catalog is baked into the CRD (enum + one CEL rule per instance type) rather than a
// ValidatingAdmissionPolicy with a param ConfigMap: CEL in a CRD needs nothing else installed and
// cannot be bypassed by a missing binding or param object, so `kubectl apply` of a bad resource is
// refused even before the operator runs. The price is that a custom catalog (BERTH_CATALOG_FILE)
// means regenerating the CRD from it (`npm run generate -w crds -- --catalog <file>`); the operator
// re-checks hardware against its own catalog and fails the endpoint with UnknownInstanceType if the
// two ever disagree.

type JsonSchema = { [key: string]: unknown };

const SAFE = Number.MAX_SAFE_INTEGER;

/** Turn zod's JSON Schema into a Kubernetes structural schema (no $ref, nullable, no additionalProperties:false). */
export function toStructural(node: unknown): JsonSchema {
  if (typeof node !== 'object' || node === null || Array.isArray(node))
    throw new Error('schema node must be an object');
  const src = node as JsonSchema;
  const out: JsonSchema = {};
  for (const [k, v] of Object.entries(src)) {
    switch (k) {
      case '$schema':
      case 'propertyNames':
      case 'id':
        break;
      case '$ref':
      case 'anyOf':
      case 'oneOf':
      case 'allOf':
        throw new Error(`structural schemas cannot use ${k}; simplify the zod schema`);
      case 'type':
        if (Array.isArray(v)) {
          const types = v.filter((t) => t !== 'null');
          if (types.length !== 1) throw new Error(`cannot express union type ${JSON.stringify(v)}`);
          out.type = types[0];
          out.nullable = true;
        } else out.type = v;
        break;
      case 'const':
        out.enum = [v];
        break;
      case 'properties':
        out.properties = Object.fromEntries(
          Object.entries(v as JsonSchema).map(([p, s]) => [p, toStructural(s)]),
        );
        break;
      case 'items':
        out.items = toStructural(v);
        break;
      case 'additionalProperties':
        if (typeof v === 'object' && v !== null) out.additionalProperties = toStructural(v);
        break; // `false` is zod's closed object; the API server prunes unknown fields anyway
      case 'minimum':
      case 'maximum':
        if (Math.abs(v as number) < SAFE) out[k] = v;
        break;
      case 'pattern':
        if (src.format !== 'date-time') out.pattern = v; // format date-time already validates
        break;
      default:
        out[k] = v;
    }
  }
  return out;
}

function hardwareRules(catalog: Catalog): JsonSchema[] {
  return catalog.instanceTypes.map((t) => ({
    rule: `self.gpuType != '${t.id}' || self.gpuCount in [${t.allowedGpuCounts.join(', ')}]`,
    message: `spec.hardware.gpuCount must be one of ${t.allowedGpuCounts.join(', ')} for gpuType ${t.id}`,
    fieldPath: '.gpuCount',
    reason: 'FieldValueInvalid',
  }));
}

export function openApiSchema(catalog: Catalog = DEFAULT_CATALOG): JsonSchema {
  const spec = toStructural(z.toJSONSchema(DedicatedEndpointSpecSchema, { io: 'input' }));
  const hardware = (spec.properties as Record<string, JsonSchema>).hardware!;
  (hardware.properties as Record<string, JsonSchema>).gpuType!.enum = catalog.instanceTypes.map((t) => t.id);
  hardware['x-kubernetes-validations'] = hardwareRules(catalog);
  const status = toStructural(z.toJSONSchema(DedicatedEndpointStatusSchema, { io: 'input' }));
  return {
    type: 'object',
    description: 'A dedicated GPU inference endpoint running vLLM. Its id is metadata.name.',
    required: ['spec'],
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: { type: 'object' },
      spec,
      status,
    },
    'x-kubernetes-validations': [
      {
        rule: `self.metadata.name.startsWith('${ENDPOINT_ID_PREFIX}') && size(self.metadata.name) <= ${ENDPOINT_ID_MAX_LENGTH}`,
        message: `metadata.name must start with "${ENDPOINT_ID_PREFIX}" and be at most ${ENDPOINT_ID_MAX_LENGTH} characters`,
        reason: 'FieldValueInvalid',
      },
    ],
  };
}

export function buildCrd(catalog: Catalog = DEFAULT_CATALOG): JsonSchema {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: CRD_NAME, labels: { 'app.kubernetes.io/part-of': 'berth' } },
    spec: {
      group: GROUP,
      scope: 'Namespaced',
      names: {
        kind: KIND,
        listKind: LIST_KIND,
        plural: PLURAL,
        singular: SINGULAR,
        shortNames: [...SHORT_NAMES],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
            { name: 'Model', type: 'string', jsonPath: '.spec.model.id' },
            { name: 'GPU', type: 'string', jsonPath: '.spec.hardware.gpuType' },
            { name: 'GPUs', type: 'integer', jsonPath: '.spec.hardware.gpuCount', priority: 1 },
            { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
            { name: 'Reason', type: 'string', jsonPath: '.status.reason' },
            { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
          ],
          schema: { openAPIV3Schema: openApiSchema(catalog) },
        },
      ],
    },
  };
}

export const CRD_FILE_HEADER = `# Generated by \`npm run generate -w crds\` from crds/src (zod). Do not edit.\n# ${API_VERSION} ${KIND}\n`;

export function renderCrdYaml(catalog: Catalog = DEFAULT_CATALOG): string {
  return CRD_FILE_HEADER + stringify(buildCrd(catalog), { lineWidth: 0 });
}
