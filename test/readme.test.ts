import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { DOCS_ROOT as ROOT, docPages, fencedBlocks, type FencedBlock } from './helpers/docs.js';
import { useHarness } from './helpers/harness.js';

/**
 * The command examples of the README and of docs/, run as written from the repository's folder,
 * one line after the other, against this file's private Redis. Each page runs on a data dir of its
 * own and an emptied Redis (as the pages tell: a data dir of their own), its blocks in page order.
 * The comments beside a command are its contract where they quote output. The first line goes
 * through `npx` itself (which must find this project's own `outbox`); the others run the bin npx
 * runs, `dist/apps/cli/main.js`, since npm's own start-up costs 1–3 s a call on 2 cores.
 *
 * A block runs when every line is an `npx outbox …` command or a comment that continues the line
 * above. Lines with a variable in front, other programs (pm2, curl, redis-cli) or continuations
 * are for a reader's shell, not this test. A block after an `<!-- not run: why -->` line is
 * skipped.
 */

/** Commands another test runs, or that do not end by themselves. */
const SKIPPED: { pattern: RegExp; why: string }[] = [
  { pattern: /^npx outbox chaos\b/, why: 'runs the whole system under pm2 for 20 s: test/chaos.test.ts runs it' },
  { pattern: /^npx outbox bench\b/, why: 'test/bench.test.ts runs it' },
  { pattern: /^npx outbox redis\b/, why: 'acts on the managed Redis of the machine' },
  { pattern: /\s--watch\b/, why: 'runs until Ctrl-C' },
];

/** How long one command may take before it is killed and the test fails (lab takes the longest). */
const COMMAND_TIMEOUT_MS = 120_000;

interface Command {
  command: string;
  comment: string;
}

/** The commands of a runnable block, with their comments, or null when the block is not one. */
function commandsOf(block: FencedBlock): Command[] | null {
  if (!['', 'sh', 'bash', 'shell'].includes(block.lang)) return null;
  if (/^<!--\s*not run\b/.test(block.before.trim())) return null;
  const commands: Command[] = [];
  for (const line of block.lines) {
    if (line.trim() === '') continue;
    if (/^\s+#\s/.test(line)) {
      // A comment continuing the command above it.
      if (commands.length === 0) return null;
      commands[commands.length - 1].comment += ` ${line.trim().replace(/^#\s/, '')}`;
      continue;
    }
    if (!line.startsWith('npx outbox ')) return null;
    const [command, ...comment] = line.split(/\s+#\s/);
    if (command.trimEnd().endsWith('\\')) return null;
    commands.push({ command: command.trim(), comment: comment.join(' # ') });
  }
  return commands.length > 0 ? commands : null;
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

function sh(command: string, env: Record<string, string>): Promise<Run> {
  return new Promise((resolve, reject) => {
    // A process group of its own, so that a command that hangs is killed with its children.
    const child = spawn('sh', ['-c', command], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let output = '';
    const timer = setTimeout(() => {
      output += `\n(killed: still running after ${COMMAND_TIMEOUT_MS / 1000} s)`;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }, COMMAND_TIMEOUT_MS);
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}

const h = useHarness({ init: false });

describe('README and docs: the command blocks', () => {
  it('every block of outbox commands runs as written, page by page, with the output its comments quote', async () => {
    const pages = docPages()
      .map((page) => ({ page, blocks: fencedBlocks(page).map(commandsOf).filter((commands): commands is Command[] => commands !== null) }))
      .filter(({ blocks }) => blocks.length > 0);
    const ran: string[] = [];
    for (const { page, blocks } of pages) {
      const dir = join(h.env.dir, page.replace(/[^\w.-]/g, '-'));
      mkdirSync(dir);
      await h.client.flushall();
      const env = { OUTBOX_DIR: dir, REDIS_URL: h.env.redisUrl, OUTBOX_CRASH_POINTS: '' };
      for (const { command, comment } of blocks.flat()) {
        if (SKIPPED.some(({ pattern }) => pattern.test(command))) continue;
        const run = await sh(ran.length === 0 ? command : command.replace(/^npx outbox /, 'node dist/apps/cli/main.js '), env);
        ran.push(`${page}: ${command}`);
        const where = `${page}: ${command}\n${run.output}`;
        if (command === 'npx outbox relay-crash') {
          // It SIGKILLs itself between push and mark, as the comment says.
          assert.equal(run.code, 137, where);
          continue;
        }
        assert.equal(run.code, 0, where);
        // Quoted artifacts: "→ dualwrite.out: INCONSISTENT orders=3 published=2", "report.txt: orders=4 …".
        for (const quoted of comment.matchAll(/([a-z_]+\.(?:out|txt)): ([A-Z_]+(?: [a-z_]+=\d+)*|(?:[a-z_]+=\d+ ?)+)/g)) {
          const text = readFileSync(`${dir}/${quoted[1]}`, 'utf8');
          const expected = quoted[2].trim();
          assert.ok(text.includes(expected) || text.replace(/\n/g, ' ').includes(expected), `${page}: ${command}: ${quoted[1]} should say "${expected}", got:\n${text}`);
        }
      }
    }
    // The lab's steps and the recovery tools are in docs/getting-started.md.
    for (const expected of ['npx outbox init', 'npx outbox report', 'npx outbox verify', 'npx outbox verify --repair', 'npx outbox replay --from 1 --to 3']) {
      assert.ok(ran.includes(`docs/getting-started.md: ${expected}`), `no runnable block of docs/getting-started.md has "${expected}" any more; ran:\n${ran.join('\n')}`);
    }
  });
});

describe('README and docs: the example code', () => {
  it('shows the example files as they are (the build compiles them, test/package.test.ts runs them)', () => {
    const whole: string[] = [];
    for (const page of docPages()) {
      for (const block of fencedBlocks(page).filter((b) => b.lang === 'ts' && b.lines[0]?.startsWith('// examples/'))) {
        const named = /^\/\/ (examples\/[\w/.-]+\.ts)(:| \(excerpt\))/.exec(block.lines[0]);
        assert.ok(named, `${page}:${block.line}: a block that names an example must start with "// examples/<file>.ts:" (the whole file) or "// examples/<file>.ts (excerpt)"`);
        const file = readFileSync(join(ROOT, named[1]), 'utf8');
        if (named[2] === ':') {
          assert.equal(block.lines.join('\n') + '\n', file, `${page}:${block.line}: ${named[1]} differs from the page`);
          whole.push(`${page}: ${named[1]}`);
          continue;
        }
        // An excerpt: its lines appear in the file, in the same order.
        const fileLines = file.split('\n');
        let at = 0;
        for (const line of block.lines.slice(1).filter((l) => l.trim() !== '')) {
          const found = fileLines.indexOf(line, at);
          assert.ok(found >= 0, `${page}:${block.line}: the excerpt's line is not in ${named[1]} (or not in this order):\n${line}`);
          at = found + 1;
        }
      }
    }
    for (const file of ['events.ts', 'handlers.ts', 'main.ts']) {
      assert.ok(whole.includes(`docs/your-service.md: examples/quickstart/${file}`), `docs/your-service.md lost examples/quickstart/${file}`);
    }
  });
});
