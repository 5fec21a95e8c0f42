export { createApp } from './app.ts';
export { requestListener } from './http/fast-entry.ts';
export { parseConfig, ConfigError, configSchema, type Config } from './platform/config.ts';
export { startApi, type RunningApi } from './server.ts';
export { ApiError, errorBody, errorFrame, familyOf } from './platform/errors.ts';
export type {
  Backends,
  EndpointCache,
  EndpointLogs,
  EndpointRuntime,
  Endpoints,
  EndpointWrites,
} from './dedicated/ports.ts';
export { devIdentityProvider } from './accounts/sign-in/dev-idp.ts';
export { pickModel, type Candidate, type Needs, type Policy } from './olympus/ranking.ts';
export { runManagedLoop, type CallModel, type ManagedServer, type ModelStep } from './tools/loop.ts';
export { openMcpSession } from './tools/mcp.ts';
export { chooseModel } from './olympus/choose.ts';
export { matchRoute, routeMatcher } from './olympus/routing.ts';
export { elasticCaller } from './elastic/call.ts';
export type { CatalogModel } from './elastic/entry.ts';
export { proxyAgent } from './dedicated/proxy/agent.ts';
