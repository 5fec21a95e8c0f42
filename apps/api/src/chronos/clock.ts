// The clock Chronos reads due times by. A fire or pre-warm is due when this clock reaches its time:
// due times are compared with this clock's `now()` (passed to the database), never with the
// database's own clock, so a test can run the schedule on a clock of its own (faster than real
// time) in real API processes. Heartbeats of running executions stay on the database's clock.

export interface ChronosClock {
  now(): Date;
  /** Calls `fn` once `ms` of this clock's time have passed (a real timer, scaled for a fast clock). */
  after(ms: number, fn: () => void): { cancel(): void };
}

export const systemClock: ChronosClock = {
  now: () => new Date(),
  after(ms, fn) {
    const timer = setTimeout(fn, Math.max(0, ms));
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
};
