// The one HTTP client every proxied call goes through, built once per API process: unlimited
// connections per replica (a cap would queue long streams behind each other), keep-alive 30 s, no
// pipelining (a slow answer must not hold up the next request on its connection).
import { Agent } from 'undici';

export function proxyAgent(): Agent {
  return new Agent({ keepAliveTimeout: 30_000, connections: null, pipelining: 1 });
}
