CREATE TABLE "olympus_policies" (
    "account_id" TEXT NOT NULL,
    "allowed_models" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "objective" TEXT NOT NULL DEFAULT 'cost',
    "routes" JSONB NOT NULL DEFAULT '[]',
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "olympus_policies_pkey" PRIMARY KEY ("account_id")
);

ALTER TABLE "olympus_policies" ADD CONSTRAINT "olympus_policies_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
