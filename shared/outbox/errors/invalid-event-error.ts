import { InvalidInputError } from './invalid-input-error.js';

/**
 * An event the declarations refuse: unknown type, wrong aggregate, bad aggregate id or a payload
 * its schema does not accept. One line saying which and why; nothing was written. Exit code 2.
 */
export class InvalidEventError extends InvalidInputError {}
