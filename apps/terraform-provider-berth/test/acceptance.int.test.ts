// The Terraform provider's acceptance tests (internal/provider/provider_acc_test.go: terraform-plugin-
// testing, the provider served in-process to /usr/local/bin/terraform, nothing downloaded) against a
// local-mode API started here: real PostgreSQL, engine simulator processes, the operator's pre-start
// checks against the fake model hub (org/huge fails with ModelTooLarge). `go test` runs as a child
// process while this process serves the API; every acceptance test must PASS (a skipped one fails
// this test). Go's build cache is the default one (${XDG_CACHE_HOME:-~/.cache}/go-build), so only
// the first run on a machine compiles the provider and its dependencies (minutes on 2 cores).
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { FAKE_MODELS, startFakeHub } from '@berth/test/support/fake-hub';
import { runTool } from '@berth/test/support/process';

const providerDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const terraform = process.env.TF_ACC_TERRAFORM_PATH ?? '/usr/local/bin/terraform';
const go = process.env.GO ?? (existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go');

// Every test function of the provider: a new one must be added here, or this test fails.
const GO_TESTS = [
  'TestOpenAPIFieldNames',
  'TestAccDedicatedEndpoint_lifecycle',
  'TestAccDedicatedEndpoint_failedSurfacesReason',
  'TestAccDedicatedEndpoint_createTimeout',
  'TestAccDedicatedEndpoint_existingNeedsImport',
  'TestAccDedicatedEndpoint_badInput',
  'TestAccProvider_auth',
];

let api: TestApi;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let tmp: string;
let cliConfig: string;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;

beforeAll(async () => {
  hub = await startFakeHub({ ...FAKE_MODELS, 'org/small-v2': { parameters: { BF16: 500_000_000 } } });
  tmp = mkdtempSync(path.join(tmpdir(), 'berth-tf-'));
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: path.join(tmp, 'data'),
    // 1.5 s to start: long enough for the 1 s create timeout to expire while it is building.
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 5 --startup-delay-ms 1500',
    BERTH_LOCAL_STOP_GRACE_MS: '2000',
    HF_ENDPOINT: hub.url,
  });
  acct = await api.newAccount();
  cliConfig = path.join(tmp, 'terraformrc');
  writeFileSync(cliConfig, '');
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await hub?.close();
  await api?.db.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('terraform-provider-berth', () => {
  it(
    'go test ./...: the OpenAPI field check and every acceptance test (TF_ACC=1) against a local-mode API pass',
    async () => {
      expect(existsSync(terraform), `terraform not found at ${terraform} (set TF_ACC_TERRAFORM_PATH)`).toBe(
        true,
      );
      const res = await runTool(go, ['test', '-v', '-count=1', '-timeout=15m', './...'], {
        env: {
          ...process.env,
          TF_ACC: '1',
          TF_ACC_TERRAFORM_PATH: terraform,
          TF_IN_AUTOMATION: '1',
          CHECKPOINT_DISABLE: '1',
          // An empty CLI configuration: the user's (dev_overrides, plugin caches) plays no part.
          TF_CLI_CONFIG_FILE: cliConfig,
          GOTOOLCHAIN: 'local',
          GOFLAGS: '-mod=readonly',
          BERTH_API_URL: api.url,
          BERTH_API_KEY: acct.compute,
          BERTH_TEST_GLOBAL_KEY: acct.global,
        },
        cwd: providerDir,
        timeoutMs: 15 * 60_000,
      });
      const output = res.stdout + res.stderr;
      // Each test's time, in vitest's output: `--- PASS: TestAcc… (12.34s)`.
      process.stdout.write(`${output.match(/^\s*--- \w+: .*$|^(ok|FAIL)\s.*$/gm)?.join('\n') ?? ''}\n`);
      expect(res.code, output).toBe(0);
      const passed = [...output.matchAll(/^\s*--- PASS: (Test\w+)/gm)].map((m) => m[1]);
      expect(passed.sort(), output).toEqual([...GO_TESTS].sort());
      expect(output, 'no test may be skipped').not.toMatch(/--- SKIP/);
    },
    20 * 60_000,
  );
});
