CREATE TABLE "account_identities" (
    "issuer" TEXT NOT NULL,
    "subject" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "account_identities_pkey" PRIMARY KEY ("issuer","subject")
);

CREATE TABLE "dashboard_sessions" (
    "id" TEXT NOT NULL,
    "account_id" TEXT,
    "data" JSONB NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "dashboard_sessions_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "account_identities_account_id_idx" ON "account_identities"("account_id");

CREATE INDEX "dashboard_sessions_expires_at_idx" ON "dashboard_sessions"("expires_at");

CREATE INDEX "dashboard_sessions_account_id_idx" ON "dashboard_sessions"("account_id");

ALTER TABLE "account_identities" ADD CONSTRAINT "account_identities_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

ALTER TABLE "dashboard_sessions" ADD CONSTRAINT "dashboard_sessions_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
