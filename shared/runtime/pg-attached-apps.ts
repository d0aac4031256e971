import { hostname } from 'node:os';
import type { Client } from 'pg';
import { ConflictError } from '../outbox/errors/conflict-error.js';
import type { Logger } from '../outbox/logger.js';
import { ATTACHED_LOCK } from '../outbox/postgres/locks.js';
import type { Queryable } from '../outbox/postgres/pg-schema.js';
import { pgStoreName } from '../outbox/postgres/pg-store-meta.js';

/**
 * attached-apps.ts on PostgreSQL: an app that has the PostgreSQL store open registers itself by
 * holding ATTACHED_LOCK shared on a session of its own, named `<app> <host> pid <pid>`
 * (application_name), for as long as it runs. When the session is lost (PostgreSQL restarted), it
 * connects again every second and holds the lock again. Resolves the function that lets it go.
 */
export async function attachPgApp(url: string, app: string, log: Logger): Promise<() => Promise<void>> {
  const { default: pg } = await import('pg');
  const name = `${app} ${hostname()} pid ${process.pid}`.slice(0, 63);
  let client: Client | undefined;
  let detached = false;
  let retry: NodeJS.Timeout | undefined;

  async function attach(): Promise<void> {
    const session = new pg.Client({ connectionString: url, application_name: name, connectionTimeoutMillis: 5000 });
    session.on('error', () => {});
    session.on('end', () => {
      if (client !== session) return;
      client = undefined;
      if (!detached) retry = setTimeout(reattach, 1000);
    });
    try {
      await session.connect();
      await session.query('SELECT pg_advisory_lock_shared($1)', [ATTACHED_LOCK]);
    } catch (error) {
      await session.end().catch(() => {});
      throw error;
    }
    if (detached) return void (await session.end().catch(() => {}));
    client = session;
  }

  function reattach(): void {
    attach().catch((error: Error) => {
      log.warn('cannot register with the PostgreSQL store; retrying', { error: error.message });
      if (!detached) retry = setTimeout(reattach, 1000);
    });
  }

  await attach();
  return async () => {
    detached = true;
    clearTimeout(retry);
    await client?.end().catch(() => {});
  };
}

/** The apps registered with the PostgreSQL store (the names of their sessions), oldest first. */
export async function pgAttachedApps(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT a.application_name AS name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND ((l.classid::bigint << 32) | l.objid::bigint) = $1::bigint
      ORDER BY a.backend_start`,
    [ATTACHED_LOCK],
  );
  return rows.map((row) => row.name);
}

/** Refuses (exit code 4) while an app has the PostgreSQL store open. */
export async function assertNoPgAttachedApps(db: Queryable): Promise<void> {
  const apps = await pgAttachedApps(db);
  if (apps.length === 0) return;
  throw new ConflictError(
    `${apps.join(', ')} ${apps.length === 1 ? 'has' : 'have'} ${await pgStoreName(db)} open: stop them first: npx pm2 stop ecosystem.config.cjs, or pass --ignore-attached`,
  );
}
