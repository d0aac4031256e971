import type { Options } from 'yargs';
import type { OutboxConfig } from '../../shared/outbox/config.js';
import { flagOptions } from '../../shared/runtime/config/settings.js';
import { cliStoreSettings, storeConfigOf } from '../../shared/runtime/config/store-settings.js';

/** The options every command takes, defined once (shared/runtime/config/store-settings.ts, which the apps read too). */
export const globalOptions = flagOptions(cliStoreSettings);

/** `init --force` and `lab` refuse while an app has app.db open (see shared/runtime/attached-apps.ts). */
export const ignoreAttachedOption = {
  type: 'boolean',
  default: false,
  describe: 'go ahead while apps (producer, relay) have app.db (or the PostgreSQL store) open: they refuse work until they switch to the new app.db',
} satisfies Options;

export interface GlobalArgs {
  dir?: string;
  redis?: string;
  namespace?: string;
  db?: string;
}

/** The stores' settings: each flag, else its variable, else the default; an error names the one that was set. */
export function configOf(argv: GlobalArgs): OutboxConfig {
  return storeConfigOf(argv as Record<string, unknown>);
}
