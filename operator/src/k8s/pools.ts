import type { DedicatedEndpoint } from '@berth/crds';
import { LABEL_MANAGED_BY, MANAGED_BY } from '@berth/crds';
import type { KubeConfig, KubernetesListObject } from '@kubernetes/client-node';
import { makeInformer } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { INFERENCE_POOL_API_VERSION, type InferencePool } from './builders.ts';
import { supervise, type Supervised } from './informers.ts';
import { KubeApiError, KubeRequests } from './requests.ts';

// InferencePools (the Gateway API Inference Extension's kind), which exist only where their CRD is
// installed. The operator asks the API server's discovery at start and, while the kind is not
// served, again every recheckMs (a CRD installed later is picked up without a restart); only once it
// is served does an informer watch the pools Berth manages, so a pool edited or deleted by hand
// brings its endpoint back for a pass, as a Service does. Without the CRD nothing is watched,
// applied or logged beyond one info line.

export const POOL_PLURAL = 'inferencepools';

export interface PoolWatchOptions {
  kc: KubeConfig;
  namespace: string; // '' = all namespaces
  log: Logger;
  onInformerError: () => void;
  /** A pool was added, changed or deleted (the informer's objects; drift decides what it means). */
  onEvent: (pool: InferencePool, verb: 'add' | 'update' | 'delete') => void;
  /** The kind became served (every endpoint deserves a pass). */
  onServed: () => void;
  recheckMs?: number;
}

/** Whether the API server serves InferencePools (inference.networking.k8s.io/v1). */
export async function inferencePoolsServed(requests: KubeRequests): Promise<boolean> {
  try {
    const list = await requests.send<{ resources?: { name: string }[] }>(
      'GET',
      `/apis/${INFERENCE_POOL_API_VERSION}`,
    );
    return !!list?.resources?.some((r) => r.name === POOL_PLURAL);
  } catch (err) {
    if (err instanceof KubeApiError && err.code === 404) return false;
    throw err;
  }
}

export class InferencePoolWatch {
  private readonly o: PoolWatchOptions;
  private supervised: Supervised<InferencePool> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly requests: KubeRequests;

  constructor(o: PoolWatchOptions) {
    this.o = o;
    this.requests = new KubeRequests(o.kc);
  }

  /** The kind is served and its informer has listed. */
  get served(): boolean {
    return this.supervised !== undefined;
  }

  /** Resolves once the kind is known to be absent, or its informer has listed. */
  async start(): Promise<void> {
    await this.check(true);
  }

  private async check(first: boolean): Promise<void> {
    if (this.stopped || this.supervised) return;
    let served = false;
    try {
      served = await inferencePoolsServed(this.requests);
    } catch (err) {
      this.o.log.debug({ err: String(err) }, 'InferencePool discovery failed; asking again later');
    }
    if (!served) {
      if (first)
        this.o.log.info(
          'the InferencePool CRD (inference.networking.k8s.io/v1) is not installed: no InferencePools are reconciled until it is',
        );
      this.timer = setTimeout(() => void this.check(false), this.o.recheckMs ?? 60_000);
      this.timer.unref();
      return;
    }
    const { kc, namespace: ns } = this.o;
    const scope = ns ? `/namespaces/${ns}` : '';
    const managed = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;
    const path = `/apis/${INFERENCE_POOL_API_VERSION}${scope}/${POOL_PLURAL}`;
    const informer = makeInformer<InferencePool>(
      kc,
      path,
      () =>
        this.requests.send<KubernetesListObject<InferencePool>>(
          'GET',
          `${path}?labelSelector=${encodeURIComponent(managed)}`,
        ),
      managed,
    );
    for (const verb of ['add', 'update', 'delete'] as const)
      informer.on(verb, (pool) => {
        if (pool.metadata?.managedFields) delete pool.metadata.managedFields;
        this.o.onEvent(pool, verb);
      });
    const supervised = supervise('inferencepools', informer, this.o.log, this.o.onInformerError);
    await supervised.start();
    if (this.stopped) return void (await supervised.stop());
    this.supervised = supervised;
    this.o.log.info(
      'the InferencePool CRD is installed: reconciling InferencePools for the endpoints that ask',
    );
    if (!first) this.o.onServed();
  }

  /** The endpoint's pool as the watch last saw it (undefined: absent, or the kind is not served). */
  get(ep: DedicatedEndpoint): InferencePool | undefined {
    return this.supervised?.informer.get(ep.metadata.name, ep.metadata.namespace);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.supervised?.stop();
  }
}
