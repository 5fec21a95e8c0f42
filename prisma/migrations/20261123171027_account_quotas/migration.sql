ALTER TABLE "accounts" ADD COLUMN     "quota_endpoints" INTEGER,
ADD COLUMN     "quota_gpus" INTEGER,
ADD COLUMN     "quota_keys" INTEGER;
