import { InvalidInputError } from './invalid-input-error.js';

/**
 * A setting the app cannot start with, found only when it tried (the producer's port is taken):
 * exit code 2 in the CLI, `EXIT_CONFIG` in the apps, which pm2 does not restart.
 */
export class ConfigError extends InvalidInputError {}
