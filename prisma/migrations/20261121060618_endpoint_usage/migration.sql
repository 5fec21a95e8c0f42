CREATE TABLE "endpoint_usage" (
    "account_id" TEXT NOT NULL,
    "endpoint_id" TEXT NOT NULL,
    "period_start" TIMESTAMP(3) NOT NULL,
    "requests" INTEGER NOT NULL DEFAULT 0,
    "prompt_tokens" BIGINT NOT NULL DEFAULT 0,
    "completion_tokens" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "endpoint_usage_pkey" PRIMARY KEY ("account_id","endpoint_id","period_start")
);

CREATE INDEX "endpoint_usage_endpoint_id_period_start_idx" ON "endpoint_usage"("endpoint_id", "period_start");
