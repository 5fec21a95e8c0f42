CREATE TABLE "elastic_models" (
    "name" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "input_per_mtok" BIGINT NOT NULL,
    "output_per_mtok" BIGINT NOT NULL,
    "context_length" INTEGER,
    "fallbacks" TEXT[],
    "backends" JSONB NOT NULL,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "elastic_models_pkey" PRIMARY KEY ("name")
);
