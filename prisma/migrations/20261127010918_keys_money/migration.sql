CREATE TYPE "SpendPeriod" AS ENUM ('day', 'week', 'month');

ALTER TABLE "api_keys" ADD COLUMN     "allow_dearer_fallback" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "expires_at" TIMESTAMPTZ(3),
ADD COLUMN     "grace_expires_at" TIMESTAMPTZ(3),
ADD COLUMN     "lineage" TEXT,
ADD COLUMN     "replaced_by" TEXT,
ADD COLUMN     "rotated_from" TEXT,
ADD COLUMN     "spend_limit" BIGINT,
ADD COLUMN     "spend_period" "SpendPeriod";

CREATE TABLE "key_spend" (
    "lineage" TEXT NOT NULL,
    "period" "SpendPeriod" NOT NULL,
    "period_start" TIMESTAMPTZ(3) NOT NULL,
    "account_id" TEXT NOT NULL,
    "spent" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "key_spend_pkey" PRIMARY KEY ("lineage","period","period_start")
);

CREATE TABLE "key_leases" (
    "lineage" TEXT NOT NULL,
    "replica" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "period" "SpendPeriod" NOT NULL,
    "period_start" TIMESTAMPTZ(3) NOT NULL,
    "amount" BIGINT NOT NULL DEFAULT 0,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "key_leases_pkey" PRIMARY KEY ("lineage","replica")
);

CREATE INDEX "key_spend_account_id_idx" ON "key_spend"("account_id");

CREATE INDEX "key_leases_account_id_replica_idx" ON "key_leases"("account_id", "replica");

-- Written by hand (Prisma's schema has no CHECK constraints or functions).
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_spend_limit_whole" CHECK (("spend_limit" IS NULL) = ("spend_period" IS NULL) AND ("spend_limit" IS NULL OR "spend_limit" >= 0));
ALTER TABLE "key_spend" ADD CONSTRAINT "key_spend_spent_nonnegative" CHECK ("spent" >= 0);
ALTER TABLE "key_leases" ADD CONSTRAINT "key_leases_amount_nonnegative" CHECK ("amount" >= 0);

-- The one definition of a spend period (UTC day, ISO week from Monday, calendar month), used by the
-- billing and the key listings alike.
CREATE FUNCTION "berth_period_start"(p "SpendPeriod", t TIMESTAMPTZ) RETURNS TIMESTAMPTZ
  LANGUAGE sql IMMUTABLE AS $$ SELECT date_trunc(p::text, t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$;
CREATE FUNCTION "berth_period_end"(p "SpendPeriod", t TIMESTAMPTZ) RETURNS TIMESTAMPTZ
  LANGUAGE sql IMMUTABLE AS $$ SELECT "berth_period_start"(p, t) + ('1 ' || p::text)::interval $$;
