import type { CoordinationV1Api, V1Lease } from '@kubernetes/client-node';
import { V1MicroTime } from '@kubernetes/client-node';
import type { Logger } from 'pino';

// Leader election on a coordination.k8s.io/v1 Lease, after client-go's leaderelection: a candidate
// takes the lease when the holder has not renewed it for leaseDuration (measured on OUR clock from
// when we last saw the record change, so clock skew between replicas does not matter); the leader
// renews every retryPeriod and steps down if it cannot renew within renewDeadline. Writes use the
// lease's resourceVersion, so two candidates cannot both win.

export interface LeaderOptions {
  api: CoordinationV1Api;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationSeconds: number;
  renewDeadlineSeconds: number;
  retryPeriodSeconds: number;
  log: Logger;
  onStartedLeading: () => void;
  /** Awaited before the lease is released, so two leaders never overlap. */
  onStoppedLeading: () => Promise<void> | void;
}

export class LeaderElector {
  private readonly o: LeaderOptions;
  private leading = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private observed: { key: string; at: number } | undefined;
  private lastRenew = 0;
  private loop: Promise<void> = Promise.resolve();

  constructor(o: LeaderOptions) {
    this.o = o;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    this.schedule(0);
  }

  /** Stop campaigning; if leading, release the lease so a standby takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.loop;
    if (this.leading) {
      await this.setLeading(false);
      try {
        const lease = await this.o.api.readNamespacedLease({
          name: this.o.name,
          namespace: this.o.namespace,
        });
        if (lease.spec?.holderIdentity === this.o.identity) {
          lease.spec = {
            holderIdentity: '',
            leaseDurationSeconds: 1,
            renewTime: new V1MicroTime(),
            leaseTransitions: lease.spec?.leaseTransitions ?? 0,
          };
          await this.o.api.replaceNamespacedLease({
            name: this.o.name,
            namespace: this.o.namespace,
            body: lease,
          });
          this.o.log.info({ lease: this.o.name }, 'leader lease released');
        }
      } catch (err) {
        this.o.log.warn({ err }, 'could not release the leader lease; it will expire');
      }
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.loop = this.tick().finally(() => this.schedule(this.o.retryPeriodSeconds * 1000));
    }, ms);
  }

  private async tick(): Promise<void> {
    try {
      const ok = await this.tryAcquireOrRenew();
      if (ok) {
        this.lastRenew = Date.now();
        if (!this.leading) await this.setLeading(true);
        return;
      }
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, 'leader election attempt failed');
    }
    if (this.leading && Date.now() - this.lastRenew > this.o.renewDeadlineSeconds * 1000) {
      this.o.log.error({ lease: this.o.name }, 'could not renew the leader lease in time; stepping down');
      await this.setLeading(false);
    }
  }

  private async setLeading(v: boolean): Promise<void> {
    if (this.leading === v) return;
    this.leading = v;
    this.o.log.info(
      { identity: this.o.identity, lease: `${this.o.namespace}/${this.o.name}` },
      v ? 'became leader' : 'stopped leading',
    );
    if (v) this.o.onStartedLeading();
    else await this.o.onStoppedLeading();
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const { api, namespace, name, identity } = this.o;
    const now = new V1MicroTime();
    let lease: V1Lease;
    try {
      lease = await api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if ((err as { code?: number }).code !== 404) throw err;
      await api.createNamespacedLease({
        namespace,
        body: {
          metadata: { name, namespace },
          spec: {
            holderIdentity: identity,
            leaseDurationSeconds: this.o.leaseDurationSeconds,
            acquireTime: now,
            renewTime: now,
            leaseTransitions: 0,
          },
        },
      });
      return true;
    }
    const spec = lease.spec ?? {};
    const key = `${spec.holderIdentity}|${spec.renewTime?.valueOf()}`;
    if (this.observed?.key !== key) this.observed = { key, at: Date.now() };
    const holder = spec.holderIdentity;
    const expired =
      Date.now() - this.observed.at > (spec.leaseDurationSeconds ?? this.o.leaseDurationSeconds) * 1000;
    if (holder && holder !== identity && !expired) return false;
    const transitions = (spec.leaseTransitions ?? 0) + (holder === identity ? 0 : 1);
    lease.spec = {
      ...spec,
      holderIdentity: identity,
      leaseDurationSeconds: this.o.leaseDurationSeconds,
      acquireTime: holder === identity && spec.acquireTime ? new V1MicroTime(spec.acquireTime) : now,
      renewTime: now,
      leaseTransitions: transitions,
    };
    // replace carries metadata.resourceVersion: a concurrent writer makes this fail with 409.
    await api.replaceNamespacedLease({ name, namespace, body: lease });
    return true;
  }
}
