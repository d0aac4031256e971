/**
 * An expected failure: the CLI and the apps print its message as one line, without a stack trace,
 * and exit with `exitCode`.
 */
export class OutboxError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = 1,
  ) {
    super(message);
    this.name = new.target.name;
  }
}
