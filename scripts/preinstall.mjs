// npm runs this when it installs the project (package.json "preinstall"; npm 7+ runs it once the
// dependencies are in place, before the build). Plain Node, no dependencies, and it never fails the
// install (CI installs redis-server after `npm ci`; a project that depends on outbox may bring its
// own Redis): it says in one line what a new user would otherwise learn from the first command.
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

function onPath(program) {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir || '.', program), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

try {
  if (!onPath('redis-server')) {
    console.error('outbox: redis-server is not installed: apt-get install redis-server (Redis 6.2 or newer), or point REDIS_URL at a running Redis');
  }
} catch {
  // A check that cannot run says nothing: the install goes on.
}
