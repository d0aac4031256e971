import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { useHarness } from './helpers/harness.js';

/**
 * The README's command examples, run as written from the repository's folder, one line after the
 * other on one data dir (as the README tells: a data dir of their own), against this file's private
 * Redis. The comments beside a command are its contract where they quote output. The first line
 * goes through `npx` itself (which must find this project's own `outbox`); the others run the bin
 * npx runs, `dist/apps/cli/main.js`, since npm's own start-up costs 1–3 s a call on 2 cores.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

/** The lines of the first ``` block after `after` that start with `npx outbox`, with their comments. */
function commandBlock(after: string): { command: string; comment: string }[] {
  const start = README.indexOf(after);
  assert.ok(start >= 0, `README has no "${after}"`);
  const open = README.indexOf('```\n', start);
  const close = README.indexOf('```', open + 4);
  const lines = README.slice(open + 4, close).split('\n');
  const commands: { command: string; comment: string }[] = [];
  for (const line of lines) {
    const [command, ...comment] = line.split(/\s+#\s/);
    if (command.startsWith('npx outbox ')) commands.push({ command: command.trim(), comment: comment.join(' # ') });
    else if (command.trim() === '' && commands.length > 0) commands[commands.length - 1].comment += ` ${comment.join(' # ')}`;
  }
  assert.ok(commands.length > 0, `no npx outbox lines in the block after "${after}"`);
  return commands;
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

function sh(command: string, env: Record<string, string>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', command], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, output }));
  });
}

const h = useHarness({ init: false });

describe('README', () => {
  it('the seed steps and the recovery commands run as written, with the output their comments quote', async () => {
    const env = { OUTBOX_DIR: h.env.dir, REDIS_URL: h.env.redisUrl, OUTBOX_CRASH_POINTS: '' };
    const steps = [...commandBlock('## Commands\n'), ...commandBlock('Recovery, and proof under faults')];
    const ran: string[] = [];
    for (const { command, comment } of steps) {
      // chaos runs the whole system under pm2 for 20 s: test/chaos.test.ts runs it.
      if (command.startsWith('npx outbox chaos')) continue;
      const run = await sh(ran.length === 0 ? command : command.replace(/^npx outbox /, 'node dist/apps/cli/main.js '), env);
      ran.push(command);
      const where = `${command}\n${run.output}`;
      if (command === 'npx outbox relay-crash') {
        // It SIGKILLs itself between push and mark, as the comment says.
        assert.equal(run.code, 137, where);
        continue;
      }
      assert.equal(run.code, 0, where);
      // Quoted artifacts: "→ dualwrite.out: INCONSISTENT orders=3 published=2", "report.txt: orders=4 …".
      for (const quoted of comment.matchAll(/([a-z_]+\.(?:out|txt)): ([A-Z_]+(?: [a-z_]+=\d+)*|(?:[a-z_]+=\d+ ?)+)/g)) {
        const text = readFileSync(`${h.env.dir}/${quoted[1]}`, 'utf8');
        const expected = quoted[2].trim();
        assert.ok(text.includes(expected) || text.replace(/\n/g, ' ').includes(expected), `${command}: ${quoted[1]} should say "${expected}", got:\n${text}`);
      }
    }
    assert.ok(ran.includes('npx outbox report') && ran.includes('npx outbox verify'), 'the blocks lost their report and verify lines');
  });
});

describe('README: Use it in your service', () => {
  it('shows the quickstart files exactly as they are (the build compiles them, test/package.test.ts runs them)', () => {
    const start = README.indexOf('## Use it in your service');
    const end = README.indexOf('\n## ', start + 1);
    assert.ok(start >= 0, 'README has no "Use it in your service" section');
    const blocks = [...README.slice(start, end).matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
    assert.ok(blocks.length >= 3, 'the section lost its code blocks');
    for (const block of blocks) {
      const file = /^\/\/ (examples\/[\w/.-]+\.ts):/.exec(block)?.[1];
      assert.ok(file, `a code block does not start with "// examples/<file>.ts:":\n${block}`);
      assert.equal(block, readFileSync(`${ROOT}/${file}`, 'utf8'), `${file} differs from the README`);
    }
  });
});
