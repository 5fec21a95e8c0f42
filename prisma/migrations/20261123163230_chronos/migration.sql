CREATE TYPE "ChronosExecutionStatus" AS ENUM ('queued', 'running', 'succeeded', 'failed');

CREATE TABLE "chronos_runs" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "schedule" TEXT NOT NULL,
    "timezone" TEXT NOT NULL,
    "steps" JSONB NOT NULL,
    "key_id" TEXT NOT NULL,
    "next_fire_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "chronos_runs_pkey" PRIMARY KEY ("id")
);

CREATE TABLE "chronos_executions" (
    "id" TEXT NOT NULL,
    "run_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "trigger" TEXT NOT NULL,
    "scheduled_for" TIMESTAMPTZ(3),
    "status" "ChronosExecutionStatus" NOT NULL DEFAULT 'queued',
    "reason" TEXT,
    "steps" JSONB NOT NULL,
    "results" JSONB NOT NULL DEFAULT '[]',
    "cost" BIGINT NOT NULL DEFAULT 0,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "worker" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "started_at" TIMESTAMPTZ(3),
    "ended_at" TIMESTAMPTZ(3),

    CONSTRAINT "chronos_executions_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "chronos_runs_account_id_created_at_idx" ON "chronos_runs"("account_id", "created_at");

CREATE INDEX "chronos_executions_run_id_created_at_idx" ON "chronos_executions"("run_id", "created_at");

CREATE UNIQUE INDEX "chronos_executions_run_id_scheduled_for_key" ON "chronos_executions"("run_id", "scheduled_for");

ALTER TABLE "chronos_runs" ADD CONSTRAINT "chronos_runs_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

ALTER TABLE "chronos_executions" ADD CONSTRAINT "chronos_executions_run_id_fkey" FOREIGN KEY ("run_id") REFERENCES "chronos_runs"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- What Prisma cannot express: costs are never negative, and a trigger is one of two kinds.
ALTER TABLE "chronos_executions" ADD CONSTRAINT "chronos_executions_cost_check" CHECK ("cost" >= 0);
ALTER TABLE "chronos_executions" ADD CONSTRAINT "chronos_executions_trigger_check" CHECK ("trigger" IN ('schedule', 'manual'));
