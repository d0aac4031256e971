import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PAYMENTS_CRASH_POINTS, formatPaymentsChaos, runPaymentsChaos } from '../shared/tooling/chaos/payments-chaos.js';

// runPaymentsChaos brings its own redis-server (shared/tooling/local, as the harness does) and PM2_HOME.
describe('examples/payments under pm2 with faults (its own chaos run)', () => {
  it('SIGKILLed consumers and relays, every consumer crash point, a pause past the lease and the ledger deleted then repaired (consumer-db-loss), with traffic: every payment event booked exactly once, in order, every account balanced', async (t) => {
    // The ledger's loss and repair take several seconds of the run: 36 s leaves every crash point its slot.
    const result = await runPaymentsChaos({ durationMs: 36_000, consumerDbLoss: true });
    t.diagnostic(formatPaymentsChaos(result).replace(/\n/g, ' | '));
    assert.ok(result.captures > 500 && result.refunds > 0, `too little traffic: ${JSON.stringify(result)}`);
    // Every kind of fault took effect, each crash point at the point armed.
    for (const kind of ['kill consumer', 'kill relay', 'pause consumer', 'consumer-db-loss', ...PAYMENTS_CRASH_POINTS.map((p) => `crash ${p}`)]) {
      assert.ok((result.faults[kind] ?? 0) >= 1, `no ${kind}: ${JSON.stringify(result.faults)}`);
    }
    assert.equal(result.misfired, 0, 'a crash fired at another point than the one armed');
    for (const name of ['lost', 'twice', 'extra', 'processedNotInbox', 'outOfOrder', 'refundBeforeCapture', 'deadLettered', 'parked'] as const) assert.equal(result[name], 0, name);
    assert.deepEqual(result.unbalanced, [], 'every account balances (checkBalances)');
    assert.deepEqual(result.verifyFailed, [], 'outbox verify with the example\'s check set passes');
    assert.equal(result.ok, true);
  });

  it('the command line refuses a bad argument in one line, exit 2, before starting anything', async () => {
    const { spawnSync } = await import('node:child_process');
    const main = new URL('../shared/tooling/chaos/payments-chaos-main.js', import.meta.url).pathname;
    const result = spawnSync(process.execPath, [main, '--duration', 'forever'], { encoding: 'utf8' });
    assert.equal(result.status, 2);
    assert.match(result.stderr.trim(), /^payments chaos: --duration must be a duration like 60s, 500ms or 2m, got "forever": write a number and a unit/);
  });
});
