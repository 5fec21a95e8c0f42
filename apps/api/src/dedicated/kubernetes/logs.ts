// GET /api/endpoints/{id}/logs on Kubernetes: what a user needs to see why an endpoint is in its
// state. First the status (phase, reason, message — the operator puts a crashed engine's last output
// there), then the Kubernetes Events of the endpoint and its pods, then each replica's log.
import { PassThrough, type Writable } from 'node:stream';
import { CoreV1Api, Log, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { LABEL_ENDPOINT } from '@berth/crds';
import { statusLines } from '../logs.ts';
import type { EndpointLogs } from '../ports.ts';

function line(out: Writable, text: string) {
  if (!out.writableEnded) out.write(text.endsWith('\n') ? text : text + '\n');
}

export function k8sEndpointLogs(kc: KubeConfig, namespace: string, pollMs = 2000): EndpointLogs {
  const core = kc.makeApiClient(CoreV1Api);
  const log = new Log(kc);
  return {
    async stream(e, out, { follow, signal }) {
      for (const l of statusLines(e)) line(out, l);
      const id = e.metadata.name;
      const seenEvents = new Set<string>();
      const attached = new Set<string>();
      const following: Promise<void>[] = [];

      const listPods = async () =>
        (
          await core
            .listNamespacedPod({ namespace, labelSelector: `${LABEL_ENDPOINT}=${id}` })
            .catch(() => undefined)
        )?.items ?? [];
      // The endpoint's and its pods' Events not printed yet (an Event seen again with a higher
      // count is printed again: it happened again).
      const printEvents = async (podNames: Set<string>) => {
        const events = await core.listNamespacedEvent({ namespace }).catch(() => undefined);
        const relevant = (events?.items ?? [])
          .filter((ev) => ev.involvedObject.name === id || podNames.has(ev.involvedObject.name ?? ''))
          .filter((ev) => !seenEvents.has(`${ev.metadata?.uid}/${ev.count ?? 1}`))
          .sort((a, b) =>
            String(a.lastTimestamp ?? a.eventTime ?? '').localeCompare(
              String(b.lastTimestamp ?? b.eventTime ?? ''),
            ),
          );
        for (const ev of relevant) {
          seenEvents.add(`${ev.metadata?.uid}/${ev.count ?? 1}`);
          const at = ev.lastTimestamp ?? ev.eventTime ?? ev.firstTimestamp;
          line(
            out,
            `${at ? new Date(at).toISOString() : '-'} ${ev.type} ${ev.reason} ${ev.involvedObject.kind}/${ev.involvedObject.name}: ${ev.message ?? ''}`,
          );
        }
      };
      // One replica: its last exit and waiting reason, then its log (followed while `follow` holds).
      const replica = async (pod: V1Pod) => {
        const name = pod.metadata?.name ?? '?';
        line(out, `# replica ${name} (${pod.status?.phase ?? 'Unknown'})`);
        for (const cs of pod.status?.containerStatuses ?? []) {
          const term = cs.lastState?.terminated ?? cs.state?.terminated;
          if (term)
            line(
              out,
              `# last exit: code ${term.exitCode} (${term.reason ?? 'Error'})${term.message ? `\n${term.message}` : ''}`,
            );
          const waiting = cs.state?.waiting;
          if (waiting?.reason)
            line(out, `# waiting: ${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}`);
        }
        if (signal.aborted) return;
        const sink = new PassThrough();
        sink.on('data', (d: Buffer) => out.writableEnded || out.write(d));
        try {
          const req = await log.log(namespace, name, pod.spec?.containers[0]?.name ?? 'engine', sink, {
            follow,
            tailLines: 1000,
            timestamps: true,
          });
          signal.addEventListener('abort', () => req.abort(), { once: true });
          await new Promise<void>((resolve) => {
            sink.on('end', resolve);
            sink.on('close', resolve);
            signal.addEventListener('abort', () => resolve(), { once: true });
          });
        } catch (err) {
          line(out, `# (no log from ${name}: ${(err as Error).message.split('\n')[0]})`);
        }
      };

      let pods = await listPods();
      line(out, '# events');
      await printEvents(new Set(pods.map((p) => p.metadata?.name ?? '')));
      if (!follow) {
        for (const pod of pods) await replica(pod);
        return;
      }
      // Follow: every replica's log at once, and replicas that appear later (an endpoint opened
      // while building or hibernated, a scale-up, a restart), with new Events, until the caller ends.
      while (!signal.aborted && !out.writableEnded) {
        for (const pod of pods) {
          const name = pod.metadata?.name ?? '';
          // A pod only has a log once a container started (or ended).
          const started = (pod.status?.containerStatuses ?? []).some(
            (c) => c.state?.running ?? c.state?.terminated ?? c.lastState?.terminated,
          );
          if (!name || attached.has(name) || !started) continue;
          attached.add(name);
          following.push(replica(pod));
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, pollMs);
          signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
        });
        if (signal.aborted) break;
        pods = await listPods();
        for (const name of [...attached])
          if (!pods.some((p) => p.metadata?.name === name)) attached.delete(name);
        await printEvents(new Set([...pods.map((p) => p.metadata?.name ?? ''), ...attached]));
      }
      await Promise.allSettled(following);
    },
  };
}
