ALTER TABLE "olympus_policies" ADD COLUMN     "embedding_model" TEXT,
ADD COLUMN     "route_threshold" DOUBLE PRECISION NOT NULL DEFAULT 0.5;
