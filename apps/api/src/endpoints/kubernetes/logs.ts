// GET /api/endpoints/{id}/logs on Kubernetes: what a user needs to see why an endpoint is in its
// state. First the status (phase, reason, message — the operator puts a crashed engine's last output
// there), then the Kubernetes Events of the endpoint and its pods, then each replica's log.
import { PassThrough, type Writable } from 'node:stream';
import { CoreV1Api, Log, type KubeConfig } from '@kubernetes/client-node';
import { LABEL_ENDPOINT } from '@berth/crds';
import { statusLines } from '../logs.ts';
import type { EndpointLogs } from '../ports.ts';

function line(out: Writable, text: string) {
  if (!out.writableEnded) out.write(text.endsWith('\n') ? text : text + '\n');
}

export function k8sEndpointLogs(kc: KubeConfig, namespace: string): EndpointLogs {
  const core = kc.makeApiClient(CoreV1Api);
  const log = new Log(kc);
  return {
    async stream(e, out, { follow, signal }) {
      for (const l of statusLines(e)) line(out, l);
      const id = e.metadata.name;
      const pods = await core
        .listNamespacedPod({ namespace, labelSelector: `${LABEL_ENDPOINT}=${id}` })
        .catch(() => undefined);
      const podNames = new Set((pods?.items ?? []).map((p) => p.metadata?.name ?? ''));
      const events = await core.listNamespacedEvent({ namespace }).catch(() => undefined);
      const relevant = (events?.items ?? [])
        .filter((ev) => ev.involvedObject.name === id || podNames.has(ev.involvedObject.name ?? ''))
        .sort((a, b) =>
          String(a.lastTimestamp ?? a.eventTime ?? '').localeCompare(
            String(b.lastTimestamp ?? b.eventTime ?? ''),
          ),
        );
      line(out, '# events');
      for (const ev of relevant) {
        const at = ev.lastTimestamp ?? ev.eventTime ?? ev.firstTimestamp;
        line(
          out,
          `${at ? new Date(at).toISOString() : '-'} ${ev.type} ${ev.reason} ${ev.involvedObject.kind}/${ev.involvedObject.name}: ${ev.message ?? ''}`,
        );
      }
      for (const pod of pods?.items ?? []) {
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
      }
    },
  };
}
