// GET /api/endpoints/{id}/logs in local mode: the endpoint's status, then its log file (the
// engines' output, the supervisor's lines and the reconciler's events, written by the operator's
// local runtime), followed while `follow` holds.
import { existsSync, statSync } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import type { DedicatedEndpoint } from '@berth/crds';
import type { LogFiles } from '@berth/operator/local';
import { statusLines } from '../logs.ts';
import type { EndpointLogs } from '../ports.ts';

/** GET /api/endpoints/{id}/logs in local mode: the status, then the endpoint's log file. */
export function localEndpointLogs(files: LogFiles, pollMs = 250): EndpointLogs {
  return {
    async stream(e: DedicatedEndpoint, out: Writable, { follow, signal }) {
      const write = (s: string | Buffer) => out.writableEnded || out.write(s);
      for (const l of statusLines(e)) write(l + '\n');
      const id = e.metadata.name;
      const older = await readFile(`${files.path(id)}.1`).catch(() => Buffer.alloc(0));
      const current = await readFile(files.path(id)).catch(() => Buffer.alloc(0));
      write(Buffer.concat([older, current]));
      if (!follow) return;
      // Follow: poll the file's size and send what was appended (from the start after a rotation).
      let offset = current.length;
      while (!signal.aborted && !out.writableEnded) {
        await new Promise((r) => setTimeout(r, pollMs));
        const size = existsSync(files.path(id)) ? statSync(files.path(id)).size : 0;
        if (size < offset) offset = 0;
        if (size === offset) continue;
        const fh = await open(files.path(id), 'r');
        try {
          const buf = Buffer.alloc(size - offset);
          await fh.read(buf, 0, buf.length, offset);
          offset = size;
          write(buf);
        } finally {
          await fh.close();
        }
      }
    },
  };
}
