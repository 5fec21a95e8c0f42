// vLLM's admission rule: at most --max-num-seqs requests run at once; the rest wait in FIFO order.
// The counts are the engine's `vllm:num_requests_running` / `vllm:num_requests_waiting` gauges.
import type { JobState } from './job.ts';
import type { EngineMetrics } from './metrics.ts';

export interface Schedulable {
  state: JobState;
}

export class Scheduler<J extends Schedulable> {
  private readonly queue: (J | undefined)[] = [];
  private head = 0;
  private readonly maxNumSeqs: number;
  private readonly metrics: EngineMetrics;
  private readonly onStart: (job: J) => void;

  /** `onStart` runs when a job gets a slot (its state is already `running`). */
  constructor(maxNumSeqs: number, metrics: EngineMetrics, onStart: (job: J) => void) {
    this.maxNumSeqs = maxNumSeqs;
    this.metrics = metrics;
    this.onStart = onStart;
  }

  /** Runs the job now if a slot is free and nobody waits, else queues it. */
  submit(job: J): void {
    job.state = 'queued';
    if (this.metrics.running < this.maxNumSeqs && this.metrics.waiting === 0) this.start(job);
    else {
      this.queue.push(job);
      this.metrics.waiting++;
    }
  }

  /**
   * Marks the job done. A running job frees its slot for the next waiting one; a waiting job just
   * stops counting (it is skipped when its turn comes). Returns whether it was running.
   */
  remove(job: J): boolean {
    const was = job.state;
    job.state = 'done';
    if (was === 'queued') this.metrics.waiting--;
    if (was !== 'running') return false;
    this.metrics.running--;
    this.drain();
    return true;
  }

  private start(job: J): void {
    job.state = 'running';
    this.metrics.running++;
    this.onStart(job);
  }

  private drain(): void {
    while (this.metrics.running < this.maxNumSeqs && this.head < this.queue.length) {
      const next = this.queue[this.head]!;
      this.queue[this.head++] = undefined;
      if (next.state !== 'queued') continue; // left while waiting; already uncounted
      this.metrics.waiting--;
      this.start(next);
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
  }
}
