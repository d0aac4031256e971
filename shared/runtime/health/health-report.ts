/** One thing an app depends on, as its health endpoint reports it. */
export interface Check {
  ok: boolean;
  /** Why it is not ok (absent when ok). */
  reason?: string;
  [detail: string]: unknown;
}

/** What `GET /healthz` answers (200 when `ok`, else 503), for every app. */
export interface HealthReport {
  ok: boolean;
  /** The failing checks' reasons, joined by "; " (absent when ok). */
  reason?: string;
  app: string;
  pid: number;
  /** The data dir and Redis namespace the app runs on: `outbox status` tells another deployment's answer apart. The producer, which never talks to Redis, has no namespace. */
  dir: string;
  namespace?: string;
  uptimeMs: number;
  checks: Record<string, Check>;
}

export interface AppIdentity {
  app: string;
  dir: string;
  /** None for the producer: it never talks to Redis. */
  namespace?: string;
}

/** The report of `checks`: ok when every check is. */
export function healthReport(identity: AppIdentity, checks: Record<string, Check>): HealthReport {
  const failing = Object.values(checks).filter((check) => !check.ok);
  return {
    ok: failing.length === 0,
    ...(failing.length > 0 ? { reason: failing.map((check) => check.reason ?? 'failed').join('; ') } : {}),
    app: identity.app,
    pid: process.pid,
    dir: identity.dir,
    ...(identity.namespace === undefined ? {} : { namespace: identity.namespace }),
    uptimeMs: Math.round(process.uptime() * 1000),
    checks,
  };
}

/** A check that failed with `reason`, plus details. */
export function failed(reason: string, details: Record<string, unknown> = {}): Check {
  return { ok: false, reason, ...details };
}
