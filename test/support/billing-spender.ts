// Concurrent spenders on one account through a billing Wallet: each loops reserve → (settle or
// release) until it is refused. Used in process by tests and, as a script, as another API replica
// in its own Node process, with the same wallet the API runs:
//   node --import tsx test/support/billing-spender.ts spend <database url> <account> <spenders> <bound>
//     prints `ready`, waits for a line on stdin, spends, flushes, gives its lease back and prints one
//     JSON line with what it did;
//   node --import tsx test/support/billing-spender.ts hold <database url> <account> <amount> <cost>
//     reserves `amount`, settles it at `cost` without flushing, prints `holding` and waits to be killed;
//   node --import tsx test/support/billing-spender.ts stream <database url> <account> <spenders> <bound>
//     prints `ready <replica>`, and after a line on stdin spends (each call costs its bound) until it
//     is killed, printing `<calls> <charged>` every 50 ms (a replica killed mid-run, with SIGKILL).
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '@berth/db';
import { pino } from 'pino';
import { postgresBillingEvents } from '../../apps/api/src/billing/notifications.ts';
import { billingRepository } from '../../apps/api/src/billing/repository.ts';
import { createWallet, type Wallet, type WalletConfig } from '../../apps/api/src/billing/wallet.ts';

export interface SpendResult {
  ok: number;
  released: number;
  refused: number;
  /** Sum of what settles charged, in micro-units. */
  charged: bigint;
  tokens: { prompt: number; completion: number };
}

export const TEST_WALLET_CONFIG: WalletConfig = {
  flushIntervalMs: 200,
  leaseTtlMs: 5_000,
  freeQueries: 0,
  reclaimWaitMs: 300,
};

/** A call settles at a cost derived from its number, between half the bound and the bound. */
export function costOf(call: number, bound: bigint): bigint {
  return bound / 2n + (BigInt(call * 7919) % (bound / 2n + 1n));
}

export async function runSpenders(
  wallet: Wallet,
  o: { accountId: string; spenders: number; bound: bigint; seed?: number },
): Promise<SpendResult> {
  const result: SpendResult = {
    ok: 0,
    released: 0,
    refused: 0,
    charged: 0n,
    tokens: { prompt: 0, completion: 0 },
  };
  let call = o.seed ?? 0;
  await Promise.all(
    Array.from({ length: o.spenders }, async () => {
      for (;;) {
        const r = await wallet.reserve({ accountId: o.accountId, amount: o.bound });
        if (!r.ok) {
          result.refused++;
          return;
        }
        const n = call++;
        // Let other spenders (and the other process) interleave while the call "runs".
        await new Promise((resolve) => setTimeout(resolve, n % 3));
        if (n % 10 === 9) {
          r.hold.release();
          result.released++;
          continue;
        }
        const cost = costOf(n, o.bound);
        result.charged += r.hold.settle(cost, {
          keyId: 'key_spender',
          model: 'bench-model',
          promptTokens: 1,
          completionTokens: 2,
        });
        result.tokens.prompt += 1;
        result.tokens.completion += 2;
        result.ok++;
      }
    }),
  );
  return result;
}

async function main([mode, url, accountId, a, b]: string[]) {
  if (!url || !accountId || !a || !b || !['spend', 'hold', 'stream'].includes(mode!))
    throw new Error('usage: billing-spender.ts spend|hold|stream <url> <account> <n> <n>');
  const logger = pino({ level: process.env.SPENDER_LOG_LEVEL ?? 'warn' }, pino.destination(2));
  const db = await openDatabase({ kind: 'postgres', url, poolSize: 4 });
  const events = await postgresBillingEvents({ url, logger });
  const config =
    mode === 'hold'
      ? { ...TEST_WALLET_CONFIG, flushIntervalMs: 600_000 }
      : mode === 'stream'
        ? { ...TEST_WALLET_CONFIG, flushIntervalMs: 1_000, leaseTtlMs: 5_000 }
        : TEST_WALLET_CONFIG;
  const wallet = createWallet({ repo: billingRepository(db.prisma), events, logger, config });
  if (mode === 'hold') {
    const r = await wallet.reserve({ accountId, amount: BigInt(a) });
    if (!r.ok) throw new Error('refused');
    r.hold.settle(BigInt(b), {
      keyId: 'key_spender',
      model: 'bench-model',
      promptTokens: 1,
      completionTokens: 1,
    });
    process.stdout.write('holding\n');
    setInterval(() => {}, 60_000);
    return;
  }
  if (mode === 'stream') return stream(wallet, accountId, Number(a), BigInt(b));
  // Warm up (connections, Prisma's query compiler) so both replicas start spending together.
  await wallet.reserve({ accountId: 'acct_warm_up', amount: 1n });
  process.stdout.write('ready\n');
  const lines = createInterface({ input: process.stdin });
  await new Promise<void>((resolve) => lines.once('line', () => resolve()));
  const r = await runSpenders(wallet, { accountId, spenders: Number(a), bound: BigInt(b), seed: 1_000_000 });
  await wallet.close();
  await events.close();
  await db.close();
  process.stdout.write(JSON.stringify({ ...r, charged: String(r.charged) }) + '\n');
  lines.close();
}

/** Spends until killed, reporting what it settled (calls, micro-units) every 50 ms. */
async function stream(wallet: Wallet, accountId: string, spenders: number, bound: bigint) {
  await wallet.reserve({ accountId: 'acct_warm_up', amount: 1n });
  process.stdout.write(`ready ${wallet.replica}\n`);
  await new Promise<void>((resolve) =>
    createInterface({ input: process.stdin }).once('line', () => resolve()),
  );
  let calls = 0;
  let charged = 0n;
  setInterval(() => process.stdout.write(`${calls} ${charged}\n`), 50);
  const usage = { keyId: 'key_spender', model: 'bench-model', promptTokens: 1, completionTokens: 1 };
  await Promise.all(
    Array.from({ length: spenders }, async () => {
      for (;;) {
        const r = await wallet.reserve({ accountId, amount: bound });
        if (!r.ok) return;
        await new Promise((resolve) => setTimeout(resolve, 1)); // a call that takes a moment
        charged += r.hold.settle(bound, usage);
        calls++;
      }
    }),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
