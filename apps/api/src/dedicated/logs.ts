// What every runtime's log stream starts with: the endpoint's status, reason and message.
import type { DedicatedEndpoint } from '@berth/crds';

export function statusLines(e: DedicatedEndpoint): string[] {
  const s = e.status ?? {};
  const lines = [
    `# endpoint ${e.metadata.name} (${e.spec.model.id} on ${e.spec.hardware.gpuCount}× ${e.spec.hardware.gpuType})`,
  ];
  lines.push(`# phase: ${s.phase ?? 'building'}${s.reason ? ` (${s.reason})` : ''}`);
  if (s.message) for (const l of s.message.split('\n')) lines.push(`# ${l}`);
  return lines;
}
