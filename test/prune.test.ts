import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { REPO_ROOT } from '../shared/local/pm2.js';
import { waitFor } from '../shared/local/wait-for.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { count } from './helpers/stores.js';

const h = useHarness();

describe('outbox prune', () => {
  it('deletes old PUBLISHED rows in batches, and verify still reconciles', async () => {
    await h.cli('place-order', '--sku', 'SKU-A', '--qty', '2', '--count', '25');
    await h.cli('change-qty', '--id', '1', '--qty', '5');
    await h.cli('cancel-order', '--id', '2');
    await h.cli('relay');
    await h.cli('consume');
    const result = await h.cli('prune', '--older-than', '0s', '--batch-size', '10');
    assert.match(result.stdout, /^pruned 27 PUBLISHED row\(s\) in 3 batch\(es\), \d+ ms; the longest batch held the write lock [\d.]+ ms$/m);
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM outbox'), 0);
    assert.equal(count(h.env.dir, 'SELECT SUM(events) FROM outbox_pruned'), 27);
    assert.equal(count(h.env.dir, 'SELECT through_seq FROM outbox_pruned WHERE aggregate_id = 1'), 2);
    const verify = await h.cli('verify');
    assert.match(verify.stdout, /processed_unique = outbox rows \+ pruned +27 +27 +ok/);
    assert.match(verify.stdout, /VERIFY OK/);

    // A pruned aggregate goes on with the next seq, kept on the order row.
    await h.cli('change-qty', '--id', '1', '--qty', '7');
    assert.equal(count(h.env.dir, 'SELECT seq FROM outbox WHERE aggregate_id = 1'), 3);
    await h.cli('relay');
    assert.match((await h.cli('consume')).stdout, /applied 1/);
    assert.match((await h.cli('verify')).stdout, /VERIFY OK/);
  });

  it('never deletes a PENDING row, nor anything after the first one, nor recent rows', async () => {
    await h.cli('place-order', '--count', '5');
    await h.cli('relay');
    await h.cli('place-order', '--count', '2');
    await h.client.del('outbox.events');
    const writable = new Database(join(h.env.dir, 'app.db'));
    writable.prepare("UPDATE outbox SET status = 'PUBLISHED' WHERE id = 7").run();
    writable.close();
    // rows 1-5 PUBLISHED, 6 PENDING, 7 PUBLISHED after it
    await h.cli('prune', '--older-than', '0s');
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM outbox WHERE id IN (6, 7)'), 2);
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM outbox WHERE id <= 5'), 0);

    await h.cli('place-order', '--count', '3');
    await h.cli('relay');
    assert.match((await h.cli('prune', '--older-than', '1h')).stdout, /^pruned 0 PUBLISHED row/);
  });

  it('rejects a bad window with one line', async () => {
    const result = await runCli(['prune', '--older-than', 'a week'], h.env);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /^outbox: --older-than must be a duration like 60s, 500ms or 2m, got "a week"$/m);
  });

  it('the relay app prunes on a schedule when OUTBOX_PRUNE_OLDER_THAN is set', async () => {
    await h.cli('place-order', '--count', '20');
    const relay = spawn(process.execPath, [join(REPO_ROOT, 'dist/apps/relay/main.js'), '--every', '300', '--slice', '300'], {
      env: { ...process.env, OUTBOX_DIR: h.env.dir, REDIS_URL: h.env.redisUrl, OUTBOX_PRUNE_OLDER_THAN: '0s', OUTBOX_PRUNE_EVERY: '500ms' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    relay.stdout.on('data', (chunk) => (output += chunk));
    const exited = new Promise((resolve) => relay.on('exit', resolve));
    try {
      await waitFor(() => count(h.env.dir, 'SELECT COUNT(*) FROM outbox') === 0, { timeoutMs: 15_000, message: 'nothing was pruned' });
      await waitFor(() => /"msg":"outbox pruned","deleted":\d+/.test(output));
    } finally {
      relay.kill('SIGTERM');
      await exited;
    }
    assert.equal(count(h.env.dir, 'SELECT SUM(events) FROM outbox_pruned'), 20);
    assert.equal(await h.client.llen('outbox.events'), 20);
  });
});
