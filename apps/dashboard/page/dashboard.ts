// The dashboard page (runs in the browser): polls GET /api/state every second and draws it; the
// retry and drop buttons POST with the token the operator gave (field, or #token=… in the URL).
import type UPlot from 'uplot';
import type { AppRow, DashboardState } from '../../../shared/runtime/dashboard/sampler.js';
import type { HeldRow } from '../../../shared/runtime/dashboard/held-actions.js';
import type { Sample } from '../../../shared/runtime/dashboard/history.js';

const uPlot = (globalThis as unknown as { uPlot: typeof UPlot }).uPlot;
const EVERY_MS = 1000;
const WINDOW_S = 10 * 60;
const TOKEN_KEY = 'outbox-dashboard-token';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

const TONES = ['ok', 'warn', 'bad'] as const;

function setText(id: string, text: string, tone?: (typeof TONES)[number]): void {
  const el = $(id);
  el.textContent = text;
  for (const t of TONES) el.classList.toggle(t, t === tone);
}

const count = (n: number | null | undefined) => (n === null || n === undefined ? '–' : n.toLocaleString('en-US'));
const perSecond = (n: number | null) => (n === null ? '' : `${n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString('en-US')}/s`);

function age(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '–';
  return ms < 1000 ? `${Math.round(ms)} ms` : ms < 120_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`;
}

// The token: from #token=… once (then out of the address bar), else what this tab was given.
const fromHash = new URLSearchParams(location.hash.slice(1)).get('token');
if (fromHash) {
  sessionStorage.setItem(TOKEN_KEY, fromHash);
  history.replaceState(null, '', location.pathname);
}
const tokenInput = $<HTMLInputElement>('token');
tokenInput.value = sessionStorage.getItem(TOKEN_KEY) ?? '';
tokenInput.addEventListener('input', () => sessionStorage.setItem(TOKEN_KEY, tokenInput.value.trim()));

// The lag chart: seconds on both axes.
const series: [number[], (number | null)[], (number | null)[]] = [[], [], []];
const chart = new uPlot(
  {
    width: Math.max(400, $('lag-chart').clientWidth - 12),
    height: 220,
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
    // Whole seconds at least between time ticks (uPlot would tick every 0.5 s of a short history).
    axes: [{ incrs: [1, 5, 10, 15, 30, 60, 120, 300, 600] }, { label: 'seconds', values: (_u, ticks) => ticks.map((t) => `${t}`) }],
    series: [
      {},
      { label: 'relay lag (oldest PENDING)', stroke: '#2f6fdb', width: 2, value: (_u, v) => (v === null ? '–' : `${v.toFixed(2)} s`) },
      { label: 'consumer lag (oldest queued)', stroke: '#d9822b', width: 2, value: (_u, v) => (v === null ? '–' : `${v.toFixed(2)} s`) },
    ],
  },
  series as unknown as UPlot.AlignedData,
  $('lag-chart'),
);

function addHistory(samples: Sample[]): void {
  for (const s of samples) {
    series[0].push(s.t / 1000);
    series[1].push(s.relayLagMs === null ? null : s.relayLagMs / 1000);
    series[2].push(s.consumerLagMs === null ? null : s.consumerLagMs / 1000);
  }
  const from = series[0].findIndex((t) => t >= (series[0].at(-1) ?? 0) - WINDOW_S);
  if (from > 0) for (const column of series) column.splice(0, from);
  chart.setData(series as unknown as UPlot.AlignedData);
}

function renderPipeline(s: DashboardState): void {
  const p = s.pipeline;
  setText('committed', count(p.committed));
  setText('rate-committed', perSecond(s.rates.committed));
  setText('pending', count(p.pending));
  setText('oldest-pending', p.pending ? `oldest ${age(p.oldestPendingAgeMs)}` : '');
  setText('rate-relayed', perSecond(s.rates.relayed));
  setText('queued', count(p.queued));
  setText('oldest-queued', p.queued ? `oldest ${age(p.oldestQueuedAgeMs)}` : '');
  setText('in-flight', count(p.inFlight));
  setText('retrying', p.retrying ? `${count(p.retrying)} waiting for a retry` : '', p.retrying ? 'warn' : undefined);
  setText('rate-applied', perSecond(s.rates.applied));
  setText('applied', count(p.applied));
  setText('duplicates', p.duplicates === undefined ? '' : `${count(p.duplicates)} duplicates skipped`);
  setText('parked-count', count(p.parked), p.parked ? 'warn' : undefined);
  setText('dead-count', count(p.deadLettered), p.deadLettered ? 'bad' : undefined);
}

function renderStore(s: DashboardState): void {
  const namespace = s.namespace === '' ? 'no namespace' : `namespace ${s.namespace}`;
  if (!s.store) return setText('store', `store – · ${namespace}`);
  const redis = {
    serves: ['Redis serves it', 'ok'],
    unclaimed: ['Redis serves no store yet', 'warn'],
    lost: ['Redis lost its state: the relay rebuilds it', 'bad'],
    behind: ['the store is behind Redis (restored from an older backup?): the relay pushes nothing; stop the apps and run outbox verify --repair', 'bad'],
    foreign: [`Redis serves another store, ${s.store.servedStore}`, 'bad'],
  }[s.store.redis] as [string, 'ok' | 'warn' | 'bad'];
  setText('store', `store ${s.store.id} · ${namespace} · ${redis[0]}`, redis[1]);
}

function cell(row: HTMLTableRowElement, text: string, className?: string): HTMLTableCellElement {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function renderApps(s: DashboardState): void {
  $('pm2-home').textContent = s.pm2.running ? `(pm2 at ${s.pm2.home})` : `(not under pm2: no daemon at ${s.pm2.home})`;
  const body = ($<HTMLTableElement>('apps')).tBodies[0];
  body.replaceChildren();
  for (const app of s.apps) {
    const row = body.insertRow();
    row.dataset.app = app.name;
    cell(row, app.name);
    const status = app.pm2?.status ?? '–';
    cell(row, status, status === 'online' ? 'ok' : app.pm2 ? 'bad' : undefined).dataset.field = 'status';
    cell(row, app.pm2 ? String(app.pm2.restarts) : '–', app.pm2?.restarts ? 'warn' : undefined).dataset.field = 'restarts';
    cell(row, app.pm2?.pid ? String(app.pm2.pid) : '–');
    cell(row, age(app.pm2?.uptimeMs));
    cell(row, app.pm2 ? `${app.pm2.cpu}%` : '–');
    cell(row, app.pm2 ? `${(app.pm2.memory / 1e6).toFixed(0)} MB` : '–');
    cell(row, healthText(app), app.health?.state === 'ok' ? 'ok' : app.health ? 'bad' : undefined).dataset.field = 'health';
  }
}

/** With several partitions, a row each; the table is hidden with one. */
function renderPartitions(s: DashboardState): void {
  $('partitions-section').hidden = !s.partitions;
  const body = ($<HTMLTableElement>('partitions')).tBodies[0];
  body.replaceChildren();
  for (const p of s.partitions ?? []) {
    const row = body.insertRow();
    row.dataset.partition = String(p.index);
    cell(row, String(p.index));
    cell(row, count(p.queued)).dataset.field = 'queued';
    cell(row, count(p.inFlight)).dataset.field = 'in-flight';
    cell(row, count(p.applied)).dataset.field = 'applied';
    cell(row, count(p.parked), p.parked ? 'warn' : undefined);
    cell(row, count(p.deadLettered), p.deadLettered ? 'bad' : undefined);
    // "<consumerId>#<token>": the token tells nothing to the page's reader.
    cell(row, p.leaseHolder === null ? 'none' : p.leaseHolder.split('#')[0], p.leaseHolder === null ? 'warn' : undefined).dataset.field = 'lease';
  }
}

function healthText(app: AppRow): string {
  if (!app.health) return app.name === 'outbox-dashboard' ? 'ok (this page)' : '–';
  return app.health.reason ? `${app.health.state}: ${app.health.reason}` : app.health.state;
}

const shownHeld: Record<string, string> = {};

function renderHeld(tableId: string, kind: 'dead-letter' | 'parked', rows: HeldRow[], total: number | undefined, shownId: string): void {
  $(shownId).textContent = total === undefined ? '' : rows.length < total ? `(the oldest ${rows.length} of ${total})` : `(${total})`;
  // Drawn again only when it changed: a button is not replaced under the pointer.
  const signature = JSON.stringify(rows);
  if (shownHeld[tableId] === signature) return;
  shownHeld[tableId] = signature;
  const body = ($<HTMLTableElement>(tableId)).tBodies[0];
  body.replaceChildren();
  if (rows.length === 0) {
    cell(body.insertRow(), kind === 'dead-letter' ? 'no dead letters' : 'nothing parked', 'empty').colSpan = 5;
    return;
  }
  for (const held of rows) {
    const row = body.insertRow();
    row.dataset.key = held.key;
    cell(row, held.id);
    cell(row, held.at ? new Date(held.at).toLocaleTimeString() : '–');
    cell(row, held.reason);
    cell(row, held.message, 'message');
    const actions = row.insertCell();
    for (const action of ['retry', 'drop'] as const) {
      const button = document.createElement('button');
      button.textContent = action;
      button.className = action;
      button.addEventListener('click', () => void act(kind, action, held, button));
      actions.append(button);
    }
  }
}

async function act(kind: 'dead-letter' | 'parked', action: 'retry' | 'drop', held: HeldRow, button: HTMLButtonElement): Promise<void> {
  if (action === 'drop' && !confirm(`Drop ${kind} ${held.id} for good?`)) return;
  button.disabled = true;
  try {
    const response = await fetch(`/api/${kind}/${action}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${tokenInput.value.trim()}` },
      body: JSON.stringify({ key: held.key }),
    });
    const answer = (await response.json()) as { error?: string };
    if (response.ok) setText('action-result', `${kind} ${held.id}: ${action === 'retry' ? 'put back on the queue' : 'dropped'}`, 'ok');
    else setText('action-result', `${kind} ${held.id}: refused (${response.status}): ${answer.error}`, 'bad');
  } catch (error) {
    setText('action-result', `${kind} ${held.id}: ${(error as Error).message}`, 'bad');
  } finally {
    button.disabled = false;
  }
}

function render(s: DashboardState): void {
  setText('updated', `updated ${new Date(s.at).toLocaleTimeString()}`);
  const problems = $('problems');
  problems.replaceChildren(...s.problems.map((text) => Object.assign(document.createElement('li'), { textContent: text })));
  renderStore(s);
  renderPipeline(s);
  renderPartitions(s);
  renderApps(s);
  renderHeld('dead-letters', 'dead-letter', s.deadLetters, s.pipeline.deadLettered, 'dead-shown');
  renderHeld('parked', 'parked', s.parked, s.pipeline.parked, 'parked-shown');
  addHistory(s.history);
}

let since = 0;
async function poll(): Promise<void> {
  const started = Date.now();
  try {
    const response = await fetch(`/api/state?since=${since}`, { cache: 'no-store' });
    if (response.ok) {
      const state = (await response.json()) as DashboardState;
      since = state.history.at(-1)?.t ?? since;
      render(state);
    } else setText('updated', `the dashboard answered ${response.status}`, 'bad');
  } catch (error) {
    setText('updated', `no answer from the dashboard: ${(error as Error).message}`, 'bad');
  }
  setTimeout(() => void poll(), Math.max(0, EVERY_MS - (Date.now() - started)));
}
void poll();
