CREATE TYPE "ToolKind" AS ENUM ('mcp', 'feature');

CREATE TABLE "tools" (
    "id" TEXT NOT NULL,
    "kind" "ToolKind" NOT NULL,
    "description" TEXT NOT NULL,
    "url" TEXT,
    "headers_sealed" TEXT,
    "header_names" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "price_per_call" BIGINT NOT NULL DEFAULT 0,
    "timeout_ms" INTEGER NOT NULL DEFAULT 30000,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "tools_pkey" PRIMARY KEY ("id")
);

CREATE TABLE "tool_enablements" (
    "account_id" TEXT NOT NULL,
    "tool_id" TEXT NOT NULL,
    "enabled_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "tool_enablements_pkey" PRIMARY KEY ("account_id","tool_id")
);

CREATE INDEX "tool_enablements_tool_id_idx" ON "tool_enablements"("tool_id");

ALTER TABLE "tool_enablements" ADD CONSTRAINT "tool_enablements_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

ALTER TABLE "tool_enablements" ADD CONSTRAINT "tool_enablements_tool_id_fkey" FOREIGN KEY ("tool_id") REFERENCES "tools"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- What Prisma cannot express: prices are never negative, and an MCP tool has its URL.
ALTER TABLE "tools" ADD CONSTRAINT "tools_price_per_call_check" CHECK ("price_per_call" >= 0);
ALTER TABLE "tools" ADD CONSTRAINT "tools_mcp_url_check" CHECK ("kind" <> 'mcp' OR "url" IS NOT NULL);

-- The built-in feature switches, enabled per account like any tool.
INSERT INTO "tools" ("id", "kind", "description") VALUES
  ('olympus', 'feature', 'Olympus: automatic model selection (model = auto, olympus or olympus-auto)'),
  ('chronos', 'feature', 'Chronos: scheduled runs');
