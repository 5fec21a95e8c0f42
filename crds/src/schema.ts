import { z } from 'zod';
import { API_VERSION, ENDPOINT_ID_PREFIX, KIND } from './constants.ts';
import { ENDPOINT_ID_MAX_LENGTH, ENDPOINT_ID_PATTERN } from './id.ts';

// The one source of the DedicatedEndpoint schema. `.meta()` keys starting with `x-kubernetes-` pass
// through to the generated CRD (see crd.ts); zod checks mirror the CEL rules so the API refuses the
// same input the API server would.

/** Hub ids: `name` or `org/name`, the characters the Hugging Face hub allows. */
const HUB_MODEL_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)?$/;
const RFC3339 = z.iso.datetime({ offset: true });

export const SecretKeyRefSchema = z.object({
  name: z.string().min(1).max(253).describe('Name of a Secret in the endpoint namespace'),
  key: z.string().min(1).max(253).default('token').describe('Key in the Secret holding the hub token'),
});

/**
 * Where the weights come from, when not the hub (spec.model.source). One URI: a PersistentVolumeClaim
 * or a node directory holding pre-downloaded weights, S3-compatible object storage (vLLM's own
 * streamer loads from it), or an OCI image holding the weights (a Kubernetes image volume).
 */
export const MODEL_SOURCE_PATTERN =
  '^(pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[^/].*)?|file:///.*|/.*|s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/.*)?|oci://[^/ ]+/[^ ]+)$';
const MODEL_SOURCE_MESSAGE =
  'spec.model.source must be pvc://<claim>[/path], file:///<dir> (or /<dir>), s3://<bucket>[/prefix] or oci://<registry>/<image>[:tag]';

export const ModelSourceSchema = z
  .string()
  .max(1024)
  .regex(new RegExp(MODEL_SOURCE_PATTERN), MODEL_SOURCE_MESSAGE)
  .describe(
    'Weights from outside the hub: pvc://claim/path, file:///dir (node path), s3://bucket/prefix (with credentialsSecretRef), oci://registry/image:tag (image volume). Unset: the hub (HF_ENDPOINT).',
  )
  .meta({
    'x-kubernetes-validations': [
      {
        rule: `self.matches('${MODEL_SOURCE_PATTERN}')`,
        message: MODEL_SOURCE_MESSAGE,
        reason: 'FieldValueInvalid',
      },
    ],
  });

export type ModelSource =
  | { kind: 'hub' }
  | { kind: 'pvc'; claim: string; path: string }
  | { kind: 'path'; path: string }
  | { kind: 's3'; bucket: string; prefix: string; uri: string }
  | { kind: 'oci'; reference: string };

/** The parts of a source URI (assumed valid against MODEL_SOURCE_PATTERN); unset = the hub. */
export function parseModelSource(source: string | undefined): ModelSource {
  if (!source) return { kind: 'hub' };
  if (source.startsWith('pvc://')) {
    const [claim, ...rest] = source.slice(6).split('/');
    return { kind: 'pvc', claim: claim!, path: rest.join('/') };
  }
  if (source.startsWith('s3://')) {
    const [bucket, ...rest] = source.slice(5).split('/');
    return { kind: 's3', bucket: bucket!, prefix: rest.join('/'), uri: source };
  }
  if (source.startsWith('oci://')) return { kind: 'oci', reference: source.slice(6) };
  return { kind: 'path', path: source.startsWith('file://') ? source.slice(7) : source };
}

export const ModelSpecSchema = z.object({
  id: z
    .string()
    .max(200)
    .regex(HUB_MODEL_ID, 'model.id must be a hub id like "org/name"')
    .describe('Model hub id, e.g. "Qwen/Qwen2.5-7B-Instruct"; also the served model name'),
  revision: z.string().min(1).max(255).default('main').describe('Hub branch, tag or commit'),
  hubTokenSecretRef: SecretKeyRefSchema.optional().describe('Hub token for gated or private models'),
  source: ModelSourceSchema.optional(),
  credentialsSecretRef: z
    .object({ name: z.string().min(1).max(253).describe('Secret in the endpoint namespace') })
    .optional()
    .describe(
      'For s3:// sources: a Secret whose keys become the engine environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION)',
    ),
  maxModelLen: z.int().min(1).max(10_000_000).optional().describe('Context length passed as --max-model-len'),
});

export const HardwareSpecSchema = z.object({
  gpuType: z.string().min(1).max(63).describe('Instance type id from the hardware catalog'),
  gpuCount: z
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(64, 'must be at most 64')
    .describe('GPUs per replica; also the tensor-parallel size'),
});

export const AuthModeSchema = z.enum(['Public', 'Private'], { error: 'must be "Private" or "Public"' });
export type AuthMode = z.infer<typeof AuthModeSchema>;

/**
 * Calls one API replica holds for a waking endpoint when its spec says nothing: what one vLLM replica
 * runs at once by default (`--max-num-seqs` 256), so the held calls a wake releases together all start
 * at once on the first replica instead of queueing behind each other.
 */
export const DEFAULT_MAX_HELD_REQUESTS = 256;

export const ScalingSpecSchema = z
  .object({
    minReplicas: z.int().min(0).max(100).default(0).describe('0 allows scale-to-zero (hibernation)'),
    maxReplicas: z.int().min(1).max(100).default(1),
    idleTimeoutSeconds: z
      .int()
      .min(15, 'must be at least 15') // above the API's 10 s activity refresh: a request in flight is never "idle"
      .max(30 * 24 * 3600)
      .default(900)
      .describe('Hibernate after this long without traffic (only when minReplicas is 0)'),
    maxHeldRequests: z
      .int()
      .min(0)
      .max(10_000, 'must be at most 10000')
      .optional()
      .describe(
        `Calls each API replica holds while the endpoint wakes; beyond it 503 \`endpoint_waking\` with Retry-After from the endpoint's measured wake time. 0: never hold (503 at once; the wake is still requested). Unset: ${DEFAULT_MAX_HELD_REQUESTS}`,
      ),
  })
  .refine((s) => s.minReplicas <= s.maxReplicas, {
    path: ['minReplicas'],
    message: 'must be less than or equal to scaling.maxReplicas',
  })
  .meta({
    'x-kubernetes-validations': [
      {
        rule: 'self.minReplicas <= self.maxReplicas',
        message: 'spec.scaling.minReplicas must be less than or equal to spec.scaling.maxReplicas',
        fieldPath: '.minReplicas',
        reason: 'FieldValueInvalid',
      },
    ],
  });

export const EnvVarSchema = z.object({
  name: z.string().regex(/^[-._a-zA-Z][-._a-zA-Z0-9]*$/, 'env names are letters, digits, "-", "." and "_"'),
  value: z.string().max(32_768),
});

export const EngineSpecSchema = z.object({
  image: z
    .string()
    .min(1)
    .max(512)
    .optional()
    .describe('Engine image; defaults to the operator-configured vLLM image'),
  args: z.array(z.string().max(4096)).max(64).optional().describe('Extra arguments appended to `vllm serve`'),
  env: z.array(EnvVarSchema).max(64).optional().describe('Extra environment variables'),
  podAnnotations: z
    .record(z.string().max(253), z.string().max(4096))
    .optional()
    .describe('Annotations copied onto the engine pods (e.g. simulator behaviour hooks)'),
});

/** How the API spreads an endpoint's calls over its Ready replicas. */
export const RoutingStrategySchema = z.enum(['roundRobin', 'leastLoad', 'prefixAffinity'], {
  error: 'must be "roundRobin", "leastLoad" or "prefixAffinity"',
});
export type RoutingStrategy = z.infer<typeof RoutingStrategySchema>;
/** The strategy of an endpoint whose spec names none (chosen by `npm run bench routing`). */
export const DEFAULT_ROUTING_STRATEGY: RoutingStrategy = 'prefixAffinity';

export const RoutingSpecSchema = z.object({
  strategy: RoutingStrategySchema.optional().describe(
    'roundRobin: in turn; leastLoad: fewest requests in flight; prefixAffinity (default): calls whose prompts start alike go to the same replica (its prefix cache), on consistent hashing with a load bound',
  ),
});

/** The Gateway API Inference Extension's endpoint picker a pool names (its Service and port). */
export const EndpointPickerRefSchema = z.object({
  name: z.string().min(1).max(253).describe('The endpoint picker (EPP) Service, in the endpoint’s namespace'),
  port: z.number().int().min(1).max(65535).describe('Its gRPC port (the EPP’s default is 9002)'),
  failureMode: z
    .enum(['FailOpen', 'FailClose'], { error: 'must be "FailOpen" or "FailClose"' })
    .optional()
    .describe('What the Gateway does when the picker does not answer (default FailClose)'),
});

export const InferencePoolSpecSchema = z.object({
  enabled: z
    .boolean()
    .optional()
    .describe(
      'Reconcile an InferencePool (inference.networking.k8s.io/v1) selecting this endpoint’s engine pods, so a Gateway can route to them; unset: the operator’s default (BERTH_INFERENCE_POOLS). Nothing happens where the InferencePool CRD is not installed',
    ),
  endpointPicker: EndpointPickerRefSchema.optional().describe(
    'The pool’s endpoint picker; unset: the operator’s default (BERTH_INFERENCE_POOL_PICKER, `<endpoint>-epp:9002`)',
  ),
});

export const DedicatedEndpointSpecSchema = z.object({
  account: z
    .string()
    .min(1)
    .max(253)
    .describe('Owning account id')
    .meta({
      'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'spec.account is immutable' }],
    }),
  model: ModelSpecSchema,
  hardware: HardwareSpecSchema,
  authMode: AuthModeSchema.default('Private').describe('Public endpoints need no API key'),
  scaling: ScalingSpecSchema.default({ minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 900 }),
  engine: EngineSpecSchema.optional(),
  routing: RoutingSpecSchema.optional().describe('Replica choice for calls through the API'),
  inferencePool: InferencePoolSpecSchema.optional().describe(
    'An InferencePool for Gateway API routing (Gateway API Inference Extension), opt-in',
  ),
});

export const PhaseSchema = z.enum(['building', 'up', 'hibernated', 'waking', 'failed']);
export type Phase = z.infer<typeof PhaseSchema>;
export const PHASES = PhaseSchema.options;

/** Dashboard label of each phase (spec/interface.md §3). */
export const PHASE_LABELS = {
  building: 'PROVISIONING',
  up: 'ONLINE',
  hibernated: 'SLEEPING',
  waking: 'WAKING UP',
  failed: 'FAILED',
} as const satisfies Record<Phase, string>;

/** Why an endpoint failed; CamelCase like Kubernetes reasons. */
export const FailureReasonSchema = z.enum([
  'ModelTooLarge',
  'ModelNotFound',
  'ModelSourceUnreachable',
  'GatedModelNoToken',
  'HubTokenInvalid',
  'UnknownInstanceType',
  'CrashLoop',
  'ImagePullFailed',
  'ProvisioningTimeout',
  'WakeTimeout',
]);
export type FailureReason = z.infer<typeof FailureReasonSchema>;

export const ConditionSchema = z.object({
  type: z.string().min(1).max(316),
  status: z.enum(['True', 'False', 'Unknown']),
  reason: z.string().max(1024).optional(),
  message: z.string().max(32_768).optional(),
  observedGeneration: z.int().min(0).optional(),
  lastTransitionTime: RFC3339.optional(),
});
export type Condition = z.infer<typeof ConditionSchema>;

export const FailureSchema = z.object({
  reason: FailureReasonSchema,
  message: z.string(),
  generation: z.int().min(0).describe('metadata.generation that failed; a newer generation builds again'),
  at: RFC3339,
});
export type Failure = z.infer<typeof FailureSchema>;

const secondsField = z.number().min(0);

/** The last replica start, stage by stage (pod times from the kubelet; seconds, millisecond precision). */
export const StartTimingSchema = z.object({
  pod: z.string().max(253).describe('The pod whose start this is'),
  createdAt: RFC3339.describe('When the pod was created'),
  scheduledSeconds: secondsField.describe('Created → scheduled on a node'),
  imageReadySeconds: secondsField.describe('Scheduled → engine container running (image pulled)'),
  engineReadySeconds: secondsField.describe('Container running → Ready (weights loaded, engine serving)'),
  totalSeconds: secondsField.describe('Created → Ready'),
});
export type StartTiming = z.infer<typeof StartTimingSchema>;

/** A node an endpoint's replica ran on: its weights are on that node's disk and page cache. */
export const WarmNodeSchema = z.object({
  name: z.string().max(253),
  readyAt: RFC3339.describe('When a replica last became Ready there'),
});
export type WarmNode = z.infer<typeof WarmNodeSchema>;

/** The most nodes status.warmNodes keeps (most recent first). */
export const MAX_WARM_NODES = 4;

/**
 * The last wake, stage by stage, as a user waits through it: the wake signal (a request reached the
 * hibernated endpoint), the replica count written, the replica scheduled on a node, its engine
 * container running (the image on the node), its engine ready (weights loaded, serving), and the
 * first byte of an answer forwarded to a caller who waited.
 */
export const WakeReceiptSchema = z.object({
  requestedAt: RFC3339.optional().describe('The wake signal (the API’s wake-requested annotation)'),
  scaledAt: RFC3339.describe('The operator wrote the replica count'),
  scheduledAt: RFC3339.optional().describe('The replica was scheduled on a node'),
  imageReadyAt: RFC3339.optional().describe('Its engine container was running (the image was on the node)'),
  engineReadyAt: RFC3339.optional().describe('Its engine was ready (weights loaded, serving)'),
  firstByteAt: RFC3339.optional().describe(
    'The API forwarded the first byte of a held call’s answer (the API’s wake-first-byte annotation)',
  ),
  pod: z.string().max(253).optional(),
  node: z.string().max(253).optional(),
  placement: z
    .enum(['warm', 'cold'])
    .optional()
    .describe('warm: on a node the endpoint ran on before (status.preferredNodes); cold: any other'),
});
export type WakeReceipt = z.infer<typeof WakeReceiptSchema>;

export const DedicatedEndpointStatusSchema = z.object({
  phase: PhaseSchema.optional(),
  reason: z.string().max(1024).optional().describe('CamelCase reason for the phase'),
  message: z.string().max(32_768).optional().describe('What happened, and what to do about it'),
  observedGeneration: z.int().min(0).optional(),
  replicas: z.int().min(0).optional(),
  readyReplicas: z.int().min(0).optional(),
  url: z.string().optional().describe('In-cluster URL of the endpoint Service (OpenAI base is <url>/v1)'),
  lastTransitionTime: RFC3339.optional().describe('When the phase last changed'),
  conditions: z
    .array(ConditionSchema)
    .optional()
    .meta({ 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['type'] }),
  // What the reconciler remembers between passes; the phase is derived from these.
  buildingSince: RFC3339.optional().describe('Start of the current build (provisioning deadline)'),
  upSince: RFC3339.optional().describe('When a replica last became Ready (idle baseline)'),
  hibernatedAt: RFC3339.optional().describe('Set when the operator scaled to zero on purpose'),
  wakeStartedAt: RFC3339.optional().describe('Set while a wake is in progress (wake deadline)'),
  wakeRequestSeen: z
    .string()
    .max(64)
    .optional()
    .describe('Value of the wake-requested annotation already acted on; a different value is a new wake'),
  failure: FailureSchema.optional(),
  lastStart: StartTimingSchema.optional().describe('Durations of the last replica start'),
  warmNodes: z
    .array(WarmNodeSchema)
    .max(MAX_WARM_NODES)
    .optional()
    .describe('Nodes where replicas last ran, most recent first (their caches hold the weights)'),
  preferredNodes: z
    .array(z.string().max(253))
    .max(MAX_WARM_NODES)
    .optional()
    .describe(
      'The warm nodes as the endpoint hibernated: a wake prefers them (preferred node affinity, by recency), never waits for them',
    ),
  lastWake: WakeReceiptSchema.optional().describe('The last wake, stage by stage'),
  preflightGeneration: z
    .int()
    .min(0)
    .optional()
    .describe('Generation whose model/hardware/token checks passed'),
});

export const ObjectMetaSchema = z
  .object({
    name: z
      .string()
      .max(ENDPOINT_ID_MAX_LENGTH)
      .regex(ENDPOINT_ID_PATTERN, `metadata.name must start with "${ENDPOINT_ID_PREFIX}" and be a DNS label`),
    namespace: z.string().optional(),
    uid: z.string().optional(),
    generation: z.int().optional(),
    resourceVersion: z.string().optional(),
    creationTimestamp: z.union([z.string(), z.date()]).optional(),
    deletionTimestamp: z.union([z.string(), z.date()]).optional(),
    labels: z.record(z.string(), z.string()).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
    finalizers: z.array(z.string()).optional(),
  })
  .loose();

export const DedicatedEndpointSchema = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(KIND),
  metadata: ObjectMetaSchema,
  spec: DedicatedEndpointSpecSchema,
  status: DedicatedEndpointStatusSchema.optional(),
});

export type DedicatedEndpointSpec = z.infer<typeof DedicatedEndpointSpecSchema>;
export type EndpointPickerRef = z.infer<typeof EndpointPickerRefSchema>;
/** The spec as a client may write it (defaults not yet applied). */
export type DedicatedEndpointSpecInput = z.input<typeof DedicatedEndpointSpecSchema>;
export type DedicatedEndpointStatus = z.infer<typeof DedicatedEndpointStatusSchema>;
export type DedicatedEndpoint = z.infer<typeof DedicatedEndpointSchema>;
