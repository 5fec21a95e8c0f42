CREATE TABLE "local_endpoints" (
    "id" TEXT NOT NULL,
    "uid" TEXT NOT NULL,
    "generation" INTEGER NOT NULL DEFAULT 1,
    "spec" JSONB NOT NULL,
    "status" JSONB,
    "annotations" JSONB NOT NULL DEFAULT '{}',
    "finalizers" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "created_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "deletion_timestamp" TIMESTAMP(3),

    CONSTRAINT "local_endpoints_pkey" PRIMARY KEY ("id")
);
