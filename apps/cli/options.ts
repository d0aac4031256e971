import type { Options } from 'yargs';
import type { OutboxConfig } from '../../shared/config.js';
import { flagOptions } from '../../shared/config/settings.js';
import { storeConfigOf, storeSettings } from '../../shared/config/store-settings.js';

/** The options every command takes, defined once (shared/config/store-settings.ts, which the apps read too). */
export const globalOptions = flagOptions(storeSettings);

/** `init --force` and `lab` refuse while an app has app.db open (see shared/local/attached-apps.ts). */
export const ignoreAttachedOption = {
  type: 'boolean',
  default: false,
  describe: 'go ahead while apps (producer, relay) have app.db open: they refuse work until they switch to the new app.db',
} satisfies Options;

export interface GlobalArgs {
  dir?: string;
  redis?: string;
  namespace?: string;
}

/** The stores' settings: each flag, else its variable, else the default; an error names the one that was set. */
export function configOf(argv: GlobalArgs): OutboxConfig {
  return storeConfigOf(argv as Record<string, unknown>);
}
