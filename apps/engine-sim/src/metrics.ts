// The subset of vLLM's Prometheus metrics the operator and dashboards read, with vLLM's names, help
// texts, bucket boundaries and labels (`model_name` = first served name, `engine` = "0" as in vLLM V1).
// Rendered in the text exposition format as prometheus_client writes it (floats as `1.0`).

const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
  80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
const E2E_BUCKETS = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
  960.0, 1920.0, 7680.0,
];

export type FinishedReason = 'stop' | 'length' | 'abort' | 'error';
const FINISHED_REASONS: readonly FinishedReason[] = ['stop', 'length', 'abort', 'error'];

export function formatNumber(n: number): string {
  if (n === Infinity) return '+Inf';
  if (n === -Infinity) return '-Inf';
  if (Number.isNaN(n)) return 'NaN';
  return Number.isInteger(n) ? `${n}.0` : String(n);
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

export class Histogram {
  readonly buckets: readonly number[];
  readonly counts: Float64Array;
  count = 0;
  sum = 0;

  constructor(buckets: readonly number[]) {
    this.buckets = buckets;
    this.counts = new Float64Array(buckets.length);
  }

  observe(v: number): void {
    this.count++;
    this.sum += v;
    const b = this.buckets;
    for (let i = 0; i < b.length; i++) {
      if (v <= b[i]!) {
        this.counts[i]!++;
        return;
      }
    }
  }

  render(out: string[], name: string, help: string, labels: string): void {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
    let cumulative = 0;
    for (let i = 0; i < this.buckets.length; i++) {
      cumulative += this.counts[i]!;
      out.push(
        `${name}_bucket{${labels},le="${formatNumber(this.buckets[i]!)}"} ${formatNumber(cumulative)}`,
      );
    }
    out.push(`${name}_bucket{${labels},le="+Inf"} ${formatNumber(this.count)}`);
    out.push(`${name}_count{${labels}} ${formatNumber(this.count)}`);
    out.push(`${name}_sum{${labels}} ${formatNumber(this.sum)}`);
  }
}

export class EngineMetrics {
  running = 0;
  waiting = 0;
  promptTokens = 0;
  generationTokens = 0;
  /** Prompt tokens looked up in the prefix cache, and those found (vLLM V1 counts tokens). */
  prefixCacheQueries = 0;
  prefixCacheHits = 0;
  readonly finished = new Map<FinishedReason, number>(FINISHED_REASONS.map((r) => [r, 0]));
  readonly ttft = new Histogram(TTFT_BUCKETS);
  readonly itl = new Histogram(ITL_BUCKETS);
  readonly e2e = new Histogram(E2E_BUCKETS);
  private readonly labels: string;

  private readonly maxNumSeqs: number;

  constructor(modelName: string, maxNumSeqs: number) {
    this.maxNumSeqs = maxNumSeqs;
    this.labels = `model_name="${escapeLabel(modelName)}",engine="0"`;
  }

  finish(reason: FinishedReason): void {
    this.finished.set(reason, (this.finished.get(reason) ?? 0) + 1);
  }

  render(): string {
    const l = this.labels;
    const out: string[] = [];
    const gauge = (name: string, help: string, v: number) =>
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name}{${l}} ${formatNumber(v)}`);
    const counter = (name: string, help: string, v: number) =>
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`, `${name}{${l}} ${formatNumber(v)}`);

    gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', this.running);
    gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', this.waiting);
    gauge(
      'vllm:kv_cache_usage_perc',
      'KV-cache usage. 1 means 100 percent usage.',
      Math.min(1, this.running / this.maxNumSeqs),
    );
    counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.', this.promptTokens);
    counter('vllm:generation_tokens_total', 'Number of generation tokens processed.', this.generationTokens);
    counter(
      'vllm:prefix_cache_queries_total',
      'Prefix cache queries, in terms of number of queried tokens.',
      this.prefixCacheQueries,
    );
    counter(
      'vllm:prefix_cache_hits_total',
      'Prefix cache hits, in terms of number of cached tokens.',
      this.prefixCacheHits,
    );
    out.push(
      '# HELP vllm:request_success_total Count of successfully processed requests.',
      '# TYPE vllm:request_success_total counter',
    );
    for (const r of FINISHED_REASONS) {
      if (r === 'abort' || r === 'error') continue;
      out.push(
        `vllm:request_success_total{${l},finished_reason="${r}"} ${formatNumber(this.finished.get(r)!)}`,
      );
    }
    this.ttft.render(
      out,
      'vllm:time_to_first_token_seconds',
      'Histogram of time to first token in seconds.',
      l,
    );
    this.itl.render(
      out,
      'vllm:inter_token_latency_seconds',
      'Histogram of inter-token latency in seconds.',
      l,
    );
    this.e2e.render(
      out,
      'vllm:e2e_request_latency_seconds',
      'Histogram of e2e request latency in seconds.',
      l,
    );
    return out.join('\n') + '\n';
  }
}
