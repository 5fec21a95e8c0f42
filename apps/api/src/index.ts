export { createApp, requestListener } from './app.ts';
export { parseConfig, ConfigError, configSchema, type Config } from './config.ts';
export { startApi, type RunningApi } from './server.ts';
export { ApiError, errorBody, errorFrame, familyOf } from './errors.ts';
export type {
  Backends,
  EndpointCache,
  EndpointLogs,
  EndpointRuntime,
  Endpoints,
  EndpointWrites,
} from './endpoints/ports.ts';
export { devIdentityProvider } from './auth/dev-idp.ts';
export { pickModel, matchRoute, type Candidate, type Needs, type Policy } from './olympus/pick.ts';
export { runManagedLoop, type CallModel, type ManagedServer, type ModelStep } from './tools/loop.ts';
export { openMcpSession } from './tools/mcp.ts';
export { chooseModel } from './olympus/choose.ts';
export { routeMatcher } from './olympus/routing.ts';
export { elasticCaller } from './elastic/call.ts';
export type { CatalogModel } from './elastic/entry.ts';
export { proxyAgent } from './proxy/agent.ts';
