// The CLI as the operator runs it: vLLM arguments, start-up failures on stderr, SIGTERM drain.
import { spawn } from 'node:child_process';
import http from 'node:http';
import { describe, expect, it } from 'vitest';
import { parseArgs } from '../src/args.ts';
import { countTokens, generateText } from '../src/text.ts';
import { cli, eventually, openStream, repoRoot, request, spawnCli } from './helpers.ts';

describe('argument parsing', () => {
  it('reads a positional model, vLLM flags and ignores the vLLM flags it does not model', () => {
    const { options, ignored } = parseArgs(
      [
        'meta-llama/Llama-3.1-8B-Instruct',
        '--served-model-name',
        'llama',
        'llama-8b',
        '--port=9001',
        '--host',
        '127.16.0.5',
        '--max-model-len',
        '8192',
        '--tensor-parallel-size',
        '2',
        '--download-dir',
        '/x',
        '--gpu-memory-utilization',
        '0.9',
        '--enforce-eager',
        '--trust-remote-code',
        '--max-num-seqs',
        '64',
      ],
      {},
    );
    expect(options).toMatchObject({
      model: 'meta-llama/Llama-3.1-8B-Instruct',
      servedModelNames: ['llama', 'llama-8b'],
      port: 9001,
      host: '127.16.0.5',
      maxModelLen: 8192,
      maxNumSeqs: 64,
    });
    expect(ignored).toEqual([
      '--tensor-parallel-size 2',
      '--download-dir /x',
      '--gpu-memory-utilization 0.9',
      '--enforce-eager',
      '--trust-remote-code',
    ]);
  });

  it('reads SIM_* environment variables, with flags taking precedence', () => {
    const { options } = parseArgs(['--model', 'm', '--ttft-ms', '5'], {
      SIM_TTFT_MS: '100',
      SIM_ITL_MS: '7',
      SIM_STARTUP_DELAY_MS: '1000',
      SIM_FAIL_STARTUP: 'oom',
      SIM_HANG: 'true',
      SIM_STALL_AFTER_TOKENS: '4',
      SIM_FAIL_STATUS: '503',
      SIM_OUTPUT_TOKENS: '12',
      SIM_MAX_NUM_SEQS: '3',
    });
    expect(options).toMatchObject({
      model: 'm',
      servedModelNames: ['m'],
      ttftMs: 5,
      itlMs: 7,
      startupDelayMs: 1000,
      failStartup: 'oom',
      hang: true,
      stallAfterTokens: 4,
      failStatus: 503,
      outputTokens: 12,
      maxNumSeqs: 3,
    });
  });

  it('rejects bad values', () => {
    expect(() => parseArgs(['--port', 'abc'], {})).toThrow(/--port/);
    expect(() => parseArgs(['--fail-startup', 'segfault'], {})).toThrow(/oom, gated/);
    expect(() => parseArgs([], { SIM_FAIL_STATUS: '200' })).toThrow(/HTTP status/);
  });
});

describe('tokenizer and generator', () => {
  it('counts word runs and punctuation', () => {
    expect(countTokens('')).toBe(0);
    expect(countTokens('Hello, world!')).toBe(4);
    expect(countTokens('  two   words ')).toBe(2);
    expect(countTokens("don't stop-now 3.14")).toBe(9); // don ' t stop - now 3 . 14
  });

  it('generates exactly n tokens of text deterministically', () => {
    expect(generateText(42, 10)).toBe(generateText(42, 10));
    expect(generateText(42, 10)).not.toBe(generateText(43, 10));
    const t = generateText(1, 50);
    expect(countTokens(t)).toBe(50);
  });
});

describe('CLI process', () => {
  it('runs on plain Node 24 without tsx (the container has no TypeScript toolchain)', async () => {
    const child = spawn(process.execPath, [cli, '--help'], { cwd: repoRoot });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    const code = await new Promise((r) => child.on('exit', r));
    expect(code).toBe(0);
    expect(out).toContain('--startup-delay-ms');
  });

  it('exits 1 with the CUDA out-of-memory error on stderr after the start-up delay', async () => {
    const p = spawnCli(['some/model', '--port', '0', '--fail-startup', 'oom', '--startup-delay-ms', '50']);
    const { code } = await p.exit;
    expect(code).toBe(1);
    expect(p.stderr()).toContain('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate');
  });

  it('exits 1 with the gated-repo error when SIM_REQUIRE_HF_TOKEN is not matched by HF_TOKEN', async () => {
    const p = spawnCli(['meta-llama/Llama-3.1-8B', '--port', '0'], {
      SIM_REQUIRE_HF_TOKEN: 'hf_good',
      HF_TOKEN: 'hf_bad',
    });
    const { code } = await p.exit;
    expect(code).toBe(1);
    expect(p.stderr()).toContain('huggingface_hub.errors.GatedRepoError');
    expect(p.stderr()).toContain(
      'Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.',
    );
    expect(p.stderr()).toContain('Access to model meta-llama/Llama-3.1-8B is restricted.');
  });

  it('serves on --host/--port with vLLM flags, drains a stream on SIGTERM and exits 0', async () => {
    const port = await freePort('127.16.0.9');
    const p = spawnCli([
      '--model',
      'm',
      '--host',
      '127.16.0.9',
      '--port',
      String(port),
      '--tensor-parallel-size',
      '2',
      '--gpu-memory-utilization',
      '0.9',
      '--ttft-ms',
      '0',
      '--itl-ms',
      '40',
      '--output-tokens',
      '15',
    ]);
    const url = `http://127.16.0.9:${port}`;
    try {
      await eventually(async () => expect((await request(url, '/health')).status).toBe(200), 20_000, 50);
      const st = await openStream(url, '/v1/chat/completions', {
        model: 'm',
        messages: [{ role: 'user', content: 'drain me' }],
        stream: true,
      });
      await eventually(() => expect(st.text()).toContain('"content":"'));
      p.child.kill('SIGTERM');
      await st.ended;
      expect(st.text().endsWith('data: [DONE]\n\n')).toBe(true);
      const { code } = await p.exit;
      expect(code).toBe(0);
      expect(p.stdout()).toContain(
        'ignoring vLLM arguments: --tensor-parallel-size 2 --gpu-memory-utilization 0.9',
      );
    } finally {
      p.child.kill('SIGKILL');
    }
  }, 30_000);
});

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = http.createServer();
    srv.listen(0, host, () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}
