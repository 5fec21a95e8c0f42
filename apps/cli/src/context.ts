// What a family of commands (tools, olympus, chronos) needs from the program: the API client of the
// chosen profile and the -o format, both read when a command runs (after the options are parsed).
import type { Client } from './client.ts';
import type { Format } from './output.ts';

export interface Context {
  client(): Client;
  format(): Format;
}
