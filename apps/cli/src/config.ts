// Profiles: `berth login` stores a base URL and a key per profile in the user's config directory
// ($XDG_CONFIG_HOME/berth/config.json, or ~/.config/berth; BERTH_CONFIG_DIR overrides), readable by
// the user only (0600). BERTH_API_URL and BERTH_API_KEY override what the profile holds.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

export interface Profile {
  url: string;
  key: string;
}
export interface ConfigFile {
  current?: string;
  profiles: Record<string, Profile>;
}

export function configDir(env = process.env): string {
  if (env.BERTH_CONFIG_DIR) return env.BERTH_CONFIG_DIR;
  return path.join(env.XDG_CONFIG_HOME || path.join(homedir(), '.config'), 'berth');
}

export const configPath = (env = process.env) => path.join(configDir(env), 'config.json');

export function readConfig(env = process.env): ConfigFile {
  const file = configPath(env);
  if (!existsSync(file)) return { profiles: {} };
  return JSON.parse(readFileSync(file, 'utf8')) as ConfigFile;
}

export function writeConfig(config: ConfigFile, env = process.env): string {
  const file = configPath(env);
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileSync(file, JSON.stringify(config, null, 2) + '\n', { mode: 0o600 });
  chmodSync(file, 0o600);
  return file;
}

/** The connection to use: flags' profile, environment overrides, then the current profile. */
export function resolve(
  profileName: string | undefined,
  env = process.env,
): Partial<Profile> & { profile: string } {
  const config = readConfig(env);
  const profile = profileName ?? env.BERTH_PROFILE ?? config.current ?? 'default';
  const stored = config.profiles[profile];
  return {
    profile,
    url: env.BERTH_API_URL || stored?.url,
    key: env.BERTH_API_KEY || stored?.key,
  };
}
