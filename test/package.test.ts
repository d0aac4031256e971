import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { useHarness } from './helpers/harness.js';
import { tempDir } from './helpers/stores.js';

// The package as a user gets it: `npm pack`, installed into a new project, used from there with its
// own TypeScript compile against the declarations. The quickstart of the README is the program:
// two events and their handlers, as docs/your-service.md writes them, run beside the lab on the
// same Redis; then the packed CLI's status and verify on that service's own database.
const run = promisify(execFile);
const h = useHarness({ init: false });
const QUICKSTART = join(REPO_ROOT, 'examples', 'quickstart');
const TSC = join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc');

describe('the packed package', () => {
  it('installs from its tarball into a new project, whose TypeScript producer, relay and consumer run beside the lab; outbox status and verify --db judge its database OK, and the lab still verifies', async () => {
    const project = tempDir();
    // The build ran before the tests; packing must not run it again (--ignore-scripts skips prepare).
    await run('npm', ['pack', '--ignore-scripts', '--pack-destination', project], { cwd: REPO_ROOT });
    const [tarball] = readdirSync(project).filter((name) => name.endsWith('.tgz'));
    assert.ok(tarball, 'npm pack wrote no tarball');
    // The project's own dependencies at the versions this repository has installed (zod for its
    // event schemas, Node's types for its compile).
    const installedVersion = (name: string) => JSON.parse(readFileSync(join(REPO_ROOT, 'node_modules', name, 'package.json'), 'utf8')).version as string;
    const dependencies = { zod: installedVersion('zod'), '@types/node': installedVersion('@types/node') };
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'todo-service', version: '1.0.0', type: 'module', private: true, dependencies }));
    // The dependencies come from this repository's installed tree (hard links: the registry and
    // better-sqlite3's compile are not what this test is about; --offline proves none is fetched);
    // npm installs the tarball itself and prunes what neither needs.
    // realpath: in a git worktree node_modules may be a symlink, which cp would copy as a link (and
    // npm would then change the repository's own tree).
    await run('cp', ['-al', realpathSync(join(REPO_ROOT, 'node_modules')), join(project, 'node_modules')]);
    await run('npm', ['install', `./${tarball}`, '--offline', '--no-audit', '--no-fund', '--ignore-scripts'], { cwd: project });
    const installed = readdirSync(join(project, 'node_modules', 'outbox', 'dist'));
    assert.deepEqual(installed.sort(), ['apps', 'shared'], 'the package ships the compiled library and apps, not the tests');

    cpSync(QUICKSTART, join(project, 'src'), { recursive: true });
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, outDir: 'out', rootDir: 'src', skipLibCheck: true }, include: ['src'] }),
    );
    await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: project });

    // The packed CLI, as the project has it: the lab first, on the same private Redis.
    const outbox = (...args: string[]) =>
      run(process.execPath, [join(project, 'node_modules', 'outbox', 'dist', 'apps', 'cli', 'main.js'), ...args], {
        cwd: project,
        env: { ...process.env, OUTBOX_DIR: h.env.dir, REDIS_URL: h.env.redisUrl },
      });
    const lab = await outbox('lab');
    assert.match(lab.stdout, /lab done: nothing lost/);

    const tasksDb = join(project, 'tasks.db');
    const { stdout } = await run(process.execPath, ['out/main.js'], { cwd: project, env: { ...process.env, REDIS_URL: h.env.redisUrl, TASKS_DB: tasksDb } });
    assert.equal(stdout, 'open tasks: 2\ncompleted: 1\n');
    // Three events (two added, one completed), each applied once, in the service's namespace.
    assert.equal(await h.client.hlen('todo:processed'), 3);

    // The operations CLI on the service's database and namespace (exit 0, or `run` throws).
    const status = await outbox('status', '--db', tasksDb, '--namespace', 'todo');
    assert.match(status.stdout, /^store +\w+ in namespace todo: Redis serves it$/m);
    assert.match(status.stdout, /^outbox +pending 0, /m);
    assert.match(status.stdout, /^consumer +processed 3, .*dead-lettered 0/m);
    const verify = await outbox('verify', '--db', tasksDb, '--namespace', 'todo');
    assert.match(verify.stdout, /VERIFY OK/);
    assert.match(verify.stdout, /^processed_unique = outbox rows +3 +3 +ok$/m);
    // And the lab beside it, untouched.
    const labVerify = await outbox('verify');
    assert.match(labVerify.stdout, /VERIFY OK/);
  });
});
