/** An error the CLI reports as one clear line and an exit code (2 usage, 1 everything else). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = 'CliError';
  }
}
