// Data access for local-mode endpoints (the only module here that touches Prisma). A row holds what
// the DedicatedEndpoint resource holds on Kubernetes; rows are turned back into that object.
import { API_VERSION, DedicatedEndpointSchema, KIND, type DedicatedEndpoint } from '@berth/crds';
import type { Prisma, PrismaClient } from '@berth/db';
import { LOCAL_NAMESPACE, type LocalEndpointRepository } from '@berth/operator/local';

type Row = {
  id: string;
  uid: string;
  generation: number;
  spec: Prisma.JsonValue;
  status: Prisma.JsonValue | null;
  annotations: Prisma.JsonValue;
  finalizers: string[];
  createdAt: Date;
  deletionTimestamp: Date | null;
};

export function toEndpoint(row: Row): DedicatedEndpoint {
  return DedicatedEndpointSchema.parse({
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: {
      name: row.id,
      namespace: LOCAL_NAMESPACE,
      uid: row.uid,
      generation: row.generation,
      creationTimestamp: row.createdAt.toISOString(),
      ...(row.deletionTimestamp ? { deletionTimestamp: row.deletionTimestamp.toISOString() } : {}),
      annotations: row.annotations ?? {},
      finalizers: row.finalizers,
    },
    spec: row.spec,
    ...(row.status ? { status: row.status } : {}),
  });
}

const json = (v: unknown) => v as Prisma.InputJsonValue;

export function localEndpointRepository(prisma: PrismaClient): LocalEndpointRepository {
  const rows = prisma.localEndpoint;
  return {
    async all() {
      return (await rows.findMany({ orderBy: { createdAt: 'asc' } })).map(toEndpoint);
    },
    async insert(e) {
      await rows.create({
        data: {
          id: e.metadata.name,
          uid: e.metadata.uid!,
          generation: e.metadata.generation ?? 1,
          spec: json(e.spec),
          annotations: json(e.metadata.annotations ?? {}),
          finalizers: e.metadata.finalizers ?? [],
          createdAt: new Date(String(e.metadata.creationTimestamp)),
        },
      });
    },
    async setStatus(id, status) {
      await rows.updateMany({ where: { id }, data: { status: json(status) } });
    },
    async setSpec(id, { spec, generation, annotations }) {
      await rows.updateMany({
        where: { id },
        data: { spec: json(spec), generation, annotations: json(annotations) },
      });
    },
    async setAnnotations(id, annotations) {
      await rows.updateMany({ where: { id }, data: { annotations: json(annotations) } });
    },
    async setFinalizers(id, finalizers) {
      await rows.updateMany({ where: { id }, data: { finalizers } });
    },
    async markDeleted(id, at) {
      const r = await rows.updateMany({
        where: { id, deletionTimestamp: null },
        data: { deletionTimestamp: at },
      });
      return r.count > 0;
    },
    async remove(id) {
      await rows.deleteMany({ where: { id } });
    },
  };
}
