import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { testClient } from '../local/redis-server.js';

/** CPU time this process has used, ms. */
export function processCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

/** CPU time the Redis servers have used, ms (INFO cpu: used_cpu_user + used_cpu_sys, all their threads). */
export async function redisCpuMs(urls: string[]): Promise<number> {
  let total = 0;
  for (const url of urls) {
    const client = testClient(url);
    try {
      const info = await client.info('cpu');
      for (const field of ['used_cpu_user', 'used_cpu_sys']) total += Number(new RegExp(`^${field}:([\\d.]+)`, 'm').exec(info)?.[1] ?? NaN) * 1000;
    } finally {
      client.disconnect();
    }
  }
  return total;
}

let ticksPerSecond: number | undefined;

/**
 * CPU time the PostgreSQL server processes of `database`'s sessions (but the asking one) have used,
 * ms: utime + stime from /proc/<pid>/stat (the server runs on this machine). The WAL writer,
 * checkpointer and other shared processes are not counted.
 */
export async function backendsCpuMs(pool: pg.Pool, database: string): Promise<number> {
  const { rows } = await pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [database]);
  // A session that ended meanwhile: its time is not counted.
  return rows.reduce((sum, { pid }) => sum + (pidCpuMs(pid) ?? 0), 0);
}

/** CPU time process `pid` (all its threads) has used, ms: utime + stime from /proc/<pid>/stat; undefined when it is gone. */
export function pidCpuMs(pid: number): number | undefined {
  ticksPerSecond ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  try {
    // The fields after the command name (which may hold spaces) in parentheses: utime and stime are the 12th and 13th.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
  } catch {
    return undefined;
  }
}

/** The machine's CPU time so far from /proc/stat, in ticks: all of it, and the idle part (idle + iowait). */
function machineTicks(): { total: number; idle: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
  return { total: fields.reduce((sum, value) => sum + value, 0), idle: fields[3] + fields[4] };
}

/** Starts watching the whole machine's CPU; the function returned tells the share of it that stayed idle since (0-1). */
export function machineIdle(): () => number {
  const before = machineTicks();
  return () => {
    const after = machineTicks();
    const total = after.total - before.total;
    return total > 0 ? (after.idle - before.idle) / total : NaN;
  };
}
