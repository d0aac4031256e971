import type { DatabaseWatch } from '../../outbox/store/live-database.js';
import { checkDatabase } from './checks.js';
import { healthReport, type AppIdentity, type HealthReport } from './health-report.js';

/** The producer's health: app.db is live, an outbox store and takes writes. It never talks to Redis, so Redis is not checked. */
export function producerHealth(identity: AppIdentity, database: DatabaseWatch): HealthReport {
  return healthReport(identity, { database: checkDatabase(database) });
}
