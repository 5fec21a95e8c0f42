import { generateKeyPairSync } from 'node:crypto';
import { HttpMethod, KubeConfig, RequestContext } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { reuseConnections } from '../src/k8s/connections.ts';

// client-node 2.x made a new undici Agent (a new TLS connection) for every request; the operator's
// requests share one.

function kubeConfig(cert: string): KubeConfig {
  const kc = new KubeConfig();
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:6443', caData: b64('ca'), skipTLSVerify: false }],
    users: [
      {
        name: 'u',
        certData: b64(cert),
        keyData: b64(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()),
      },
    ],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

async function dispatcherOf(kc: KubeConfig) {
  const ctx = new RequestContext('https://127.0.0.1:6443/api', HttpMethod.GET);
  await kc.applySecurityAuthentication(ctx);
  return ctx.getDispatcher();
}

describe('reuseConnections', () => {
  it('without it, each request gets its own dispatcher (the library default this works around)', async () => {
    const kc = kubeConfig('cert-a');
    const a = await dispatcherOf(kc);
    expect(a).toBeDefined();
    expect(await dispatcherOf(kc)).not.toBe(a);
  });

  it('requests share one dispatcher; other TLS options get a new one', async () => {
    const kc = reuseConnections(kubeConfig('cert-a'));
    const a = await dispatcherOf(kc);
    expect(a).toBeDefined();
    expect(await dispatcherOf(kc)).toBe(a);
    expect(reuseConnections(kc)).toBe(kc);
    expect(await dispatcherOf(kc)).toBe(a);

    // A rotated client certificate: a new dispatcher from then on.
    kc.users[0] = { ...kc.users[0]!, certData: Buffer.from('cert-b').toString('base64') };
    const b = await dispatcherOf(kc);
    expect(b).not.toBe(a);
    expect(await dispatcherOf(kc)).toBe(b);
  });
});
