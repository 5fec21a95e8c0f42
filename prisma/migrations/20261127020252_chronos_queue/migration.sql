ALTER TABLE "chronos_executions" ADD COLUMN     "first_choice" JSONB,
ADD COLUMN     "heartbeat_at" TIMESTAMPTZ(3);

ALTER TABLE "chronos_runs" ADD COLUMN     "prewarm_at" TIMESTAMPTZ(3);

CREATE INDEX "chronos_executions_status_created_at_idx" ON "chronos_executions"("status", "created_at");

CREATE INDEX "chronos_runs_next_fire_at_idx" ON "chronos_runs"("next_fire_at");

CREATE INDEX "chronos_runs_prewarm_at_idx" ON "chronos_runs"("prewarm_at");
