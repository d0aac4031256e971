import type { ArgumentsCamelCase } from 'yargs';
import { enableCrashPoint } from '../../../shared/outbox/crash-point.js';
import { builder, handler as relay, type RelayArgs } from './relay.js';

export const command = 'relay-crash';
export const describe = 'relay, but die (SIGKILL) after the push and before marking rows PUBLISHED';
export { builder };

export async function handler(argv: ArgumentsCamelCase<RelayArgs>): Promise<void> {
  enableCrashPoint('relay.after-push');
  await relay(argv);
  console.log('nothing was PENDING: no crash');
}
