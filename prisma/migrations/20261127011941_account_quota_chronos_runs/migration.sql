ALTER TABLE "accounts" ADD COLUMN     "quota_chronos_runs" INTEGER;
