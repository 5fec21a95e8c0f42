// What the GPU meter wrote, read straight from the database: an endpoint's meter and its closed
// intervals (`[replicas, start, end]` in ISO form), for tests that assert on billing records.
import { sql } from './postgres.ts';

export interface MeterRow {
  replicas: number;
  opened_at: Date | null;
  last_observed_at: Date;
  terminated_at: Date | null;
}

export async function gpuMeterRow(url: string, endpointId: string): Promise<MeterRow | undefined> {
  const rows = await sql<MeterRow & Record<string, unknown>>(
    url,
    'SELECT replicas, opened_at, last_observed_at, terminated_at FROM gpu_meters WHERE endpoint_id = $1',
    [endpointId],
  );
  return rows[0];
}

export async function gpuIntervals(url: string, endpointId: string): Promise<[number, string, string][]> {
  const rows = await sql<{ replicas: number; started_at: Date; ended_at: Date }>(
    url,
    'SELECT replicas, started_at, ended_at FROM gpu_intervals WHERE endpoint_id = $1 ORDER BY started_at',
    [endpointId],
  );
  return rows.map((r) => [r.replicas, r.started_at.toISOString(), r.ended_at.toISOString()]);
}
