// examples/payments' chaos run from the command line, after `npm run build`:
//   node dist/shared/tooling/chaos/payments-chaos-main.js --duration 60s [--rate 150] [--seed 11] [--targets processes,consumer-db-loss]
// --targets: processes (the kills, crash points and pauses; always on) and consumer-db-loss (the
// ledger deleted under traffic halfway through, then rebuilt by outbox verify --repair --consumer-db).
// Prints progress on stderr, the figures on stdout; exit 0 when every invariant held, 1 when one
// did not, 2 for a bad argument (one line).
import { parseDuration } from '../../outbox/duration.js';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';
import { formatPaymentsChaos, runPaymentsChaos } from './payments-chaos.js';

function parseArgs(args: string[]): { durationMs: number; rate: number; seed: number; consumerDbLoss: boolean } {
  const options = { durationMs: 60_000, rate: 150, seed: 11, consumerDbLoss: false };
  for (let i = 0; i < args.length; i += 2) {
    const [flag, value] = [args[i], args[i + 1]];
    if (value === undefined) throw new InvalidInputError(`${flag} needs a value (see the header of payments-chaos-main.ts)`);
    if (flag === '--duration') options.durationMs = parseDuration(value, '--duration');
    else if (flag === '--targets') {
      const targets = value.split(',').map((t) => t.trim());
      if (targets.some((t) => t !== 'processes' && t !== 'consumer-db-loss')) throw new InvalidInputError(`--targets takes a comma-separated list of processes, consumer-db-loss, got ${JSON.stringify(value)}`);
      options.consumerDbLoss = targets.includes('consumer-db-loss');
    }
    else if (flag === '--rate' || flag === '--seed') {
      const n = Number(value);
      if (!Number.isInteger(n) || n < (flag === '--rate' ? 1 : 0) || n > 100_000) throw new InvalidInputError(`${flag} must be a whole number${flag === '--rate' ? ' from 1' : ''} up to 100000, got ${JSON.stringify(value)}`);
      options[flag === '--rate' ? 'rate' : 'seed'] = n;
    } else throw new InvalidInputError(`unknown option ${flag}: use --duration, --rate, --seed and --targets`);
  }
  if (options.durationMs < 5000) throw new InvalidInputError('--duration must be at least 5s');
  return options;
}

let options: ReturnType<typeof parseArgs>;
try {
  options = parseArgs(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof InvalidInputError)) throw error;
  process.stderr.write(`payments chaos: ${error.message}\n`);
  process.exit(2);
}
const result = await runPaymentsChaos({ ...options, progress: (line) => process.stderr.write(`${line}\n`) });
process.stdout.write(`${formatPaymentsChaos(result)}\n`);
process.exit(result.ok ? 0 : 1);
