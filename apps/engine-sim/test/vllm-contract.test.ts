// The simulator against vLLM's own contract (operator/test/fixtures/vllm-<version>/, extracted from
// the pinned release's source; docs/vllm.md): it knows vLLM's options, refuses the others as vLLM's
// argparse does, and exports vLLM's metric names with vLLM's types.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ModelFlagError, parseArgs, UsageError } from '../src/args.ts';
import { VLLM_VERSION, vllmFlags } from '../src/vllm-flags.ts';
import { openStream, repoRoot, request, scrape, sim, spawnCli } from './helpers.ts';

const fixtures = path.join(repoRoot, 'operator/test/fixtures', `vllm-${VLLM_VERSION}`);
const rows = (file: string) =>
  readFileSync(path.join(fixtures, file), 'utf8')
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => l.split(' '));

const refusal = (argv: string[]): string => {
  try {
    parseArgs(argv, {});
  } catch (err) {
    if (err instanceof UsageError) return err.stderr;
    throw err;
  }
  return '';
};

describe(`vLLM v${VLLM_VERSION}'s options`, () => {
  it('the table is flags.txt, and the operator pins the same release', () => {
    expect([...vllmFlags]).toEqual(rows('flags.txt').map(([name, values]) => [name, values]));
    const config = readFileSync(path.join(repoRoot, 'operator/src/config.ts'), 'utf8');
    expect(config).toContain(`DEFAULT_ENGINE_IMAGE = 'vllm/vllm-openai:v${VLLM_VERSION}'`);
  });

  it('accepts every option of vllm serve with the values it takes, as `vllm serve` and as the image', () => {
    for (const [flag, values] of vllmFlags) {
      const argv = ['org/m', flag, ...(values === '0' ? [] : ['8'])];
      expect(refusal(argv), argv.join(' ')).toBe('');
      // (vllm serve refuses --model: the model is its positional argument)
      if (flag !== '--model') expect(refusal(['serve', ...argv]), argv.join(' ')).toBe('');
    }
    // what the simulator does not model is listed, with its values
    expect(parseArgs(['m', '--quantization', 'fp8', '--no-enforce-eager', '-tp', '2'], {}).ignored).toEqual([
      '--quantization fp8',
      '--no-enforce-eager',
      '-tp 2',
    ]);
  });

  it('refuses an option vLLM does not have: exit 2, argparse’s usage and error on stderr, nothing served', async () => {
    // the image's entrypoint (python3 -m vllm.entrypoints.openai.api_server): prog api_server.py
    const image = spawnCli(['org/m', '--port', '0', '--max-model-length', '4096']);
    const serve = spawnCli(['serve', 'org/m', '--port', '0', '--foo']);
    expect((await image.exit).code).toBe(2);
    expect(image.stderr()).toMatch(
      /^usage: api_server\.py .*\napi_server\.py: error: unrecognized arguments: --max-model-length 4096\n$/,
    );
    expect(image.stdout()).toBe('');
    // `vllm serve`: the top-level `vllm` parser reports what the serve subparser left over
    expect((await serve.exit).code).toBe(2);
    expect(serve.stderr()).toBe(
      'usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n' +
        'vllm: error: unrecognized arguments: --foo\n',
    );
  }, 30_000);

  it('refuses as argparse does: ambiguous abbreviations, missing values, values of switches', () => {
    expect(refusal(['serve', 'm', '--max-num', '3'])).toBe(
      'usage: vllm serve [model_tag] [options]\n' +
        'vllm serve: error: ambiguous option: --max-num could match --max-num-batched-tokens, --max-num-partial-prefills, --max-num-seqs\n',
    );
    expect(refusal(['serve', 'm', '--max-model-len'])).toMatch(
      /: argument --max-model-len: expected one argument\n$/,
    );
    expect(refusal(['m', '--served-model-name', '--port', '1'])).toMatch(
      /^usage: api_server\.py .*\napi_server\.py: error: argument --served-model-name: expected at least one argument\n$/,
    );
    expect(refusal(['m', '--enforce-eager=true'])).toMatch(
      /argument --enforce-eager: ignored explicit argument 'true'\n$/,
    );
    // an unambiguous abbreviation, `--max_model_len` and `-O3` are vLLM's too
    expect(parseArgs(['m', '--max-model', '100', '--max_num_seqs', '4', '-O3'], {}).options).toMatchObject({
      maxModelLen: 100,
      maxNumSeqs: 4,
    });
    // `vllm serve` takes the model as its positional argument only (vLLM raises a ValueError)
    expect(() => parseArgs(['serve', '--model', 'm'], {})).toThrow(ModelFlagError);
    expect(parseArgs(['--model', 'm'], {}).options.model).toBe('m');
    // the value after an unknown option is a positional: a second one is unrecognized too
    expect(refusal(['m', '--foo', '3'])).toMatch(/unrecognized arguments: --foo 3\n$/);
  });
});

describe(`vLLM v${VLLM_VERSION}'s metrics`, () => {
  it('every vllm: family on /metrics is one of vLLM’s, with its type and its sample names', async () => {
    const metrics = new Map(
      rows('metrics.txt').map(([family, type, samples, ...condition]) => [
        family!,
        { type: type!, samples: samples!.split(','), condition: condition.join(' ') },
      ]),
    );
    const s = await sim();
    // one streamed chat so the histograms and counters have samples
    const st = await openStream(s.url, '/v1/chat/completions', {
      model: 'test/model',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    await st.ended;
    expect(st.text()).toContain('data: [DONE]');
    const e = await scrape(s.url);
    const families = [...e.types].filter(([name]) => name.startsWith('vllm:'));
    expect(families.length).toBeGreaterThanOrEqual(10);
    for (const [family, type] of families) {
      const m = metrics.get(family);
      expect(m, `${family} is not a metric of vLLM v${VLLM_VERSION}`).toBeDefined();
      expect(type, family).toBe(m!.type);
      expect(m!.condition, `${family}: vLLM exports it only when ${m!.condition}`).toBe('');
    }
    const samples = new Set([...metrics.values()].flatMap((m) => m.samples));
    for (const x of e.samples.filter((x) => x.name.startsWith('vllm:')))
      expect(samples.has(x.name), `${x.name} is not a sample vLLM v${VLLM_VERSION} exports`).toBe(true);
    expect((await request(s.url, '/health')).status).toBe(200);
  });
});
