CREATE TYPE "LedgerKind" AS ENUM ('credit', 'charge', 'refund', 'adjustment');

CREATE TABLE "billing_accounts" (
    "account_id" TEXT NOT NULL,
    "balance" BIGINT NOT NULL DEFAULT 0,
    "leased" BIGINT NOT NULL DEFAULT 0,
    "paid" BOOLEAN NOT NULL DEFAULT false,
    "free_queries_used" INTEGER NOT NULL DEFAULT 0,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "billing_accounts_pkey" PRIMARY KEY ("account_id")
);

CREATE TABLE "ledger_entries" (
    "id" BIGSERIAL NOT NULL,
    "account_id" TEXT NOT NULL,
    "kind" "LedgerKind" NOT NULL,
    "amount" BIGINT NOT NULL,
    "balance_after" BIGINT NOT NULL,
    "idempotency_key" TEXT NOT NULL,
    "reference" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "ledger_entries_pkey" PRIMARY KEY ("id")
);

CREATE TABLE "billing_leases" (
    "account_id" TEXT NOT NULL,
    "replica" TEXT NOT NULL,
    "amount" BIGINT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "last_batch" BIGINT NOT NULL DEFAULT 0,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "billing_leases_pkey" PRIMARY KEY ("account_id","replica")
);

CREATE TABLE "metered_usage" (
    "account_id" TEXT NOT NULL,
    "key_id" TEXT NOT NULL,
    "model" TEXT NOT NULL,
    "period_start" TIMESTAMPTZ(3) NOT NULL,
    "requests" INTEGER NOT NULL DEFAULT 0,
    "free_requests" INTEGER NOT NULL DEFAULT 0,
    "prompt_tokens" BIGINT NOT NULL DEFAULT 0,
    "completion_tokens" BIGINT NOT NULL DEFAULT 0,
    "cost" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "metered_usage_pkey" PRIMARY KEY ("account_id","key_id","model","period_start")
);

CREATE TABLE "gpu_meters" (
    "endpoint_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "instance_type" TEXT NOT NULL,
    "gpu_type" TEXT NOT NULL,
    "gpus_per_replica" INTEGER NOT NULL,
    "replicas" INTEGER NOT NULL DEFAULT 0,
    "rate_per_gpu_hour" BIGINT NOT NULL,
    "opened_at" TIMESTAMPTZ(3),
    "last_observed_at" TIMESTAMPTZ(3) NOT NULL,
    "terminated_at" TIMESTAMPTZ(3),

    CONSTRAINT "gpu_meters_pkey" PRIMARY KEY ("endpoint_id")
);

CREATE TABLE "gpu_intervals" (
    "id" BIGSERIAL NOT NULL,
    "endpoint_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "instance_type" TEXT NOT NULL,
    "gpu_type" TEXT NOT NULL,
    "gpus_per_replica" INTEGER NOT NULL,
    "replicas" INTEGER NOT NULL,
    "rate_per_gpu_hour" BIGINT NOT NULL,
    "started_at" TIMESTAMPTZ(3) NOT NULL,
    "ended_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "gpu_intervals_pkey" PRIMARY KEY ("id")
);

CREATE TABLE "gpu_invoice_state" (
    "id" INTEGER NOT NULL DEFAULT 1,
    "invoiced_through" TIMESTAMPTZ(3),

    CONSTRAINT "gpu_invoice_state_pkey" PRIMARY KEY ("id")
);

CREATE TABLE "invoices" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "period_start" TIMESTAMPTZ(3) NOT NULL,
    "period_end" TIMESTAMPTZ(3) NOT NULL,
    "currency" TEXT NOT NULL,
    "total" BIGINT NOT NULL,
    "issued_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "invoices_pkey" PRIMARY KEY ("id")
);

CREATE TABLE "invoice_lines" (
    "invoice_id" TEXT NOT NULL,
    "position" INTEGER NOT NULL,
    "endpoint_id" TEXT NOT NULL,
    "instance_type" TEXT NOT NULL,
    "gpu_type" TEXT NOT NULL,
    "gpus_per_replica" INTEGER NOT NULL,
    "gpu_ms" BIGINT NOT NULL,
    "rate_per_gpu_hour" BIGINT NOT NULL,
    "amount" BIGINT NOT NULL,

    CONSTRAINT "invoice_lines_pkey" PRIMARY KEY ("invoice_id","position")
);

CREATE INDEX "ledger_entries_account_id_id_idx" ON "ledger_entries"("account_id", "id");

CREATE UNIQUE INDEX "ledger_entries_account_id_idempotency_key_key" ON "ledger_entries"("account_id", "idempotency_key");

CREATE INDEX "billing_leases_updated_at_idx" ON "billing_leases"("updated_at");

CREATE INDEX "metered_usage_account_id_period_start_idx" ON "metered_usage"("account_id", "period_start");

CREATE INDEX "gpu_meters_account_id_idx" ON "gpu_meters"("account_id");

CREATE INDEX "gpu_intervals_account_id_ended_at_idx" ON "gpu_intervals"("account_id", "ended_at");

CREATE UNIQUE INDEX "gpu_intervals_endpoint_id_started_at_key" ON "gpu_intervals"("endpoint_id", "started_at");

CREATE UNIQUE INDEX "invoices_account_id_period_start_key" ON "invoices"("account_id", "period_start");

ALTER TABLE "billing_accounts" ADD CONSTRAINT "billing_accounts_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

ALTER TABLE "ledger_entries" ADD CONSTRAINT "ledger_entries_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

ALTER TABLE "invoice_lines" ADD CONSTRAINT "invoice_lines_invoice_id_fkey" FOREIGN KEY ("invoice_id") REFERENCES "invoices"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- Written by hand (the Prisma schema cannot express these, and the schema diff leaves them alone).

-- Money never goes negative, and no more can be lent to API replicas than the balance holds.
ALTER TABLE "billing_accounts" ADD CONSTRAINT "billing_accounts_balance_nonnegative" CHECK ("balance" >= 0);
ALTER TABLE "billing_accounts" ADD CONSTRAINT "billing_accounts_leased_within_balance" CHECK ("leased" >= 0 AND "leased" <= "balance");
ALTER TABLE "billing_accounts" ADD CONSTRAINT "billing_accounts_free_queries_nonnegative" CHECK ("free_queries_used" >= 0);
ALTER TABLE "billing_leases" ADD CONSTRAINT "billing_leases_amount_nonnegative" CHECK ("amount" >= 0);
ALTER TABLE "ledger_entries" ADD CONSTRAINT "ledger_entries_balance_after_nonnegative" CHECK ("balance_after" >= 0);
ALTER TABLE "ledger_entries" ADD CONSTRAINT "ledger_entries_sign" CHECK (
    ("kind" IN ('credit', 'refund') AND "amount" > 0) OR ("kind" = 'charge' AND "amount" < 0) OR ("kind" = 'adjustment' AND "amount" <> 0)
);
ALTER TABLE "gpu_intervals" ADD CONSTRAINT "gpu_intervals_positive" CHECK ("ended_at" > "started_at" AND "replicas" > 0 AND "gpus_per_replica" > 0);
ALTER TABLE "gpu_invoice_state" ADD CONSTRAINT "gpu_invoice_state_singleton" CHECK ("id" = 1);
INSERT INTO "gpu_invoice_state" ("id") VALUES (1);

-- The ledger, issued invoices and closed GPU intervals are history: rows are added, never changed.
-- No semicolon may appear inside a statement or a comment here: the PostgreSQL driver adapter that
-- applies migrations splits the file on every semicolon. The body spells its one as \073.
CREATE FUNCTION "berth_refuse_change"() RETURNS trigger LANGUAGE plpgsql AS
    E'BEGIN RAISE EXCEPTION ''% is append-only: % refused'', TG_TABLE_NAME, TG_OP USING ERRCODE = ''restrict_violation''\073 END';
CREATE TRIGGER "ledger_entries_append_only" BEFORE UPDATE OR DELETE ON "ledger_entries" FOR EACH ROW EXECUTE FUNCTION "berth_refuse_change"();
CREATE TRIGGER "ledger_entries_no_truncate" BEFORE TRUNCATE ON "ledger_entries" FOR EACH STATEMENT EXECUTE FUNCTION "berth_refuse_change"();
CREATE TRIGGER "invoices_append_only" BEFORE UPDATE OR DELETE ON "invoices" FOR EACH ROW EXECUTE FUNCTION "berth_refuse_change"();
CREATE TRIGGER "invoices_no_truncate" BEFORE TRUNCATE ON "invoices" FOR EACH STATEMENT EXECUTE FUNCTION "berth_refuse_change"();
CREATE TRIGGER "invoice_lines_append_only" BEFORE UPDATE OR DELETE ON "invoice_lines" FOR EACH ROW EXECUTE FUNCTION "berth_refuse_change"();
CREATE TRIGGER "invoice_lines_no_truncate" BEFORE TRUNCATE ON "invoice_lines" FOR EACH STATEMENT EXECUTE FUNCTION "berth_refuse_change"();
CREATE TRIGGER "gpu_intervals_append_only" BEFORE UPDATE OR DELETE ON "gpu_intervals" FOR EACH ROW EXECUTE FUNCTION "berth_refuse_change"();
CREATE TRIGGER "gpu_intervals_no_truncate" BEFORE TRUNCATE ON "gpu_intervals" FOR EACH STATEMENT EXECUTE FUNCTION "berth_refuse_change"();
