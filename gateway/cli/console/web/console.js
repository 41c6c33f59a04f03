// fedgate console: views of what `fedctl -o json` shows, addressed by URL
// fragment (#/sites, #/links, #/jobs, #/jobs/ID, #/queue, #/usage, #/nodes).
// Every value is put in the page as text (textContent), never as HTML.
'use strict';

const REFRESH_MS = 2000;
// Sites poll faster: a site that stops advertising turns grey within an ad TTL.
const SITES_REFRESH_MS = 1000;
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
const state = { session: null, view: '', gen: 0, timer: null, charts: [], seenSites: new Map(),
                jobStates: new Map(), logs: null, filter: '', stateFilter: '', usageSince: '24h', jobRows: 200 };

// --- small helpers ---------------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function table(id, headers, rows, caption) {
  return el('table', { id },
    caption ? el('caption', { class: 'muted', text: caption }) : null,
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows));
}

function td(value, field, num) {
  return el('td', { 'data-field': field, class: num ? 'num' : null, text: value });
}

function n(v) { return Number(v || 0); }
function fmt(v, digits) { return n(v).toFixed(digits); }
function ago(ms) {
  const s = Math.max(0, (Date.now() - n(ms)) / 1000);
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

async function api(path, options) {
  const res = await fetch(path, Object.assign({ credentials: 'same-origin' }, options || {}));
  const type = res.headers.get('Content-Type') || '';
  const body = type.startsWith('application/json') ? await res.json() : await res.text();
  if (!res.ok) {
    const msg = body && body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${res.status}`;
    throw new Error(`${path}: ${msg}`);
  }
  return { body, headers: res.headers };
}

function showError(err) {
  const e = document.getElementById('error');
  e.textContent = err ? String(err.message || err) : '';
  e.hidden = !err;
}

function destroyCharts() {
  for (const c of state.charts) c.destroy();
  state.charts = [];
}

// A bar chart when Chart.js is loaded; the table beside it always carries
// the same numbers (the chart's text alternative).
function barChart(label, labels, datasets, tableId) {
  if (!window.Chart) return null;
  const canvas = el('canvas', { role: 'img', 'aria-label': `${label}; the numbers are in table ${tableId}` });
  const box = el('div', { class: 'chart' }, canvas);
  const css = getComputedStyle(document.documentElement);
  const colours = [css.getPropertyValue('--accent').trim(), css.getPropertyValue('--used').trim()];
  datasets.forEach((d, i) => { d.backgroundColor = colours[i % colours.length]; });
  requestAnimationFrame(() => {
    state.charts.push(new window.Chart(canvas, {
      type: 'bar', data: { labels, datasets },
      options: { animation: false, responsive: true, maintainAspectRatio: false,
                 scales: { x: { stacked: datasets.length > 1 }, y: { stacked: datasets.length > 1, beginAtZero: true } } },
    }));
  });
  return box;
}

// --- views -----------------------------------------------------------------

async function viewSites() {
  const { body } = await api('/v1/sites');
  const sites = body.sites || [];
  const now = Date.now();
  for (const s of sites) state.seenSites.set(s.site, now);
  const gone = [...state.seenSites.keys()].filter((name) => !sites.some((s) => s.site === name));
  const cards = sites.map((s) => {
    const used = n(s.total_gpus) - n(s.free_gpus);
    const pct = n(s.total_gpus) ? (100 * n(s.free_gpus)) / n(s.total_gpus) : 0;
    const meter = el('div', { class: 'meter', role: 'img', 'aria-label': `${s.free_gpus} of ${s.total_gpus} GPUs free` },
      el('div', { class: 'free' }), el('div', { class: 'used' }));
    meter.children[0].style.width = `${pct}%`;
    meter.children[1].style.width = `${100 - pct}%`;
    const reach = s.state === 'down' ? 'not heard: its ad is stale' : s.state === 'local' ? 'this gateway' : 'reachable';
    return el('article', { class: `card ${s.state}`, 'data-site': s.site },
      el('h3', {}, `${s.site} `, el('span', { class: 'badge', text: s.state })),
      meter,
      el('dl', {},
        el('dt', { text: 'Free GPUs' }), el('dd', { 'data-field': 'free_gpus', text: `${s.free_gpus} / ${s.total_gpus}` }),
        (s.models || []).map((m) => [el('dt', { text: m.model }), el('dd', { text: `${m.free_gpus} free of ${m.total_gpus}` })]),
        el('dt', { text: 'Unhealthy GPUs' }), el('dd', { text: n(s.unhealthy_gpus) }),
        el('dt', { text: 'Cordoned nodes' }), el('dd', { text: n(s.cordoned_nodes) }),
        el('dt', { text: 'Ad age' }), el('dd', { text: `${fmt(s.age_seconds, 1)} s` }),
        el('dt', { text: 'Reachable' }), el('dd', { text: reach })),
      el('p', { class: 'muted', text: `${used} in use` }));
  });
  for (const name of gone) {
    cards.push(el('article', { class: 'card gone', 'data-site': name },
      el('h3', {}, `${name} `, el('span', { class: 'badge', text: 'gone' })),
      el('p', { text: 'Its ad expired: the site stopped advertising.' })));
  }
  const rows = sites.map((s) => el('tr', { 'data-site': s.site },
    td(s.site, 'site'), td(s.state, 'state'), td(s.free_gpus, 'free_gpus', true), td(s.total_gpus, 'total_gpus', true),
    td((s.models || []).map((m) => `${m.model} ${m.free_gpus}/${m.total_gpus}`).join(', '), 'models'),
    td(n(s.unhealthy_gpus), 'unhealthy_gpus', true), td(n(s.cordoned_nodes), 'cordoned_nodes', true),
    td(fmt(s.age_seconds, 1), 'age_seconds', true)));
  const chart = barChart('Free and used GPUs per site', sites.map((s) => s.site),
    [{ label: 'free GPUs', data: sites.map((s) => n(s.free_gpus)) },
     { label: 'used GPUs', data: sites.map((s) => n(s.total_gpus) - n(s.free_gpus)) }], 'sites-table');
  return [el('h2', { text: `Sites (${sites.length})` }), el('section', { class: 'cards', 'aria-label': 'Sites' }, cards), chart,
    table('sites-table', ['Site', 'State', 'Free GPUs', 'Total GPUs', 'Models (free/total)', 'Unhealthy GPUs', 'Cordoned nodes', 'Ad age (s)'], rows)];
}

function heatClass(gbps, max) {
  if (!(max > 0)) return 'h0';
  const r = Math.log1p(gbps) / Math.log1p(max);
  return `h${Math.min(4, Math.floor(r * 4.999))}`;
}

async function viewLinks() {
  const [links, sites] = await Promise.all([api('/v1/links'), api('/v1/sites')]);
  const list = links.body.links || [];
  const names = [...new Set([...(sites.body.sites || []).map((s) => s.site), ...list.flatMap((l) => [l.from, l.to])])].sort();
  const byPair = new Map(list.map((l) => [`${l.from}\u0000${l.to}`, l]));
  const max = Math.max(0, ...list.map((l) => n(l.gbps)));
  const rows = names.map((from) => el('tr', {},
    el('th', { scope: 'row', text: from }),
    names.map((to) => {
      if (from === to) return el('td', { class: 'muted', text: '—' });
      const l = byPair.get(`${from}\u0000${to}`);
      if (!l) return el('td', { class: 'cell unmeasured', 'data-from': from, 'data-to': to, text: 'not measured' });
      const hover = `${from} → ${to}: ${fmt(l.gbps, 3)} Gbit/s, latency ${fmt(l.latency_ms, 3)} ms, measured ${fmt(l.age_seconds, 0)} s ago by ${from} (${l.method}, ${l.streams} stream${l.streams === 1 ? '' : 's'})`;
      return el('td', { class: `cell ${heatClass(n(l.gbps), max)}`, 'data-from': from, 'data-to': to, title: hover, tabindex: 0,
                        'aria-label': hover, text: `${fmt(l.gbps, 3)} Gbit/s` });
    })));
  const matrix = el('table', { id: 'links-matrix', class: 'heat' },
    el('caption', { class: 'muted', text: 'Rows send, columns receive; Gbit/s counted at the receiver. Hover or focus a cell for latency and age.' }),
    el('thead', {}, el('tr', {}, el('td', {}), names.map((s) => el('th', { scope: 'col', text: s })))),
    el('tbody', {}, rows));
  const legend = el('p', { class: 'legend', 'aria-hidden': 'true' }, 'slower',
    [0, 1, 2, 3, 4].map((i) => el('span', { class: `h${i}`, text: '■' })), 'faster (log scale)');
  const detail = list.map((l) => el('tr', { 'data-from': l.from, 'data-to': l.to },
    td(l.from, 'from'), td(l.to, 'to'), td(fmt(l.gbps, 3), 'gbps', true), td(fmt(l.latency_ms, 3), 'latency_ms', true),
    td(l.method, 'method'), td(l.streams, 'streams', true), td(fmt(l.age_seconds, 0), 'age_seconds', true)));
  return [el('h2', { text: 'Links' }), matrix,
    list.length ? null : el('p', { text: 'No link is measured yet (fedctl links probe SITE measures one).' }),
    table('links-table', ['From', 'To', 'Gbit/s', 'Latency (ms)', 'Method', 'Streams', 'Age (s)'], detail, 'Every measured link')];
}

function jobSites(j) {
  const run = ((j.run || {}).sites || []).map((s) => s.site);
  return run.length ? run : ((j.placement || {}).sites || []);
}

// Rows past the limit stay hidden (laying out thousands of rows is what
// costs): "Show more" raises it.
const JOB_ROWS = 200;

function filterJobs(tbody, status, more) {
  const t0 = performance.now();
  const q = state.filter.trim().toLowerCase();
  let matching = 0;
  for (const tr of tbody.rows) {
    const ok = (!q || tr.dataset.search.includes(q)) && (!state.stateFilter || tr.dataset.state === state.stateFilter);
    tr.hidden = !ok || matching >= state.jobRows;
    matching += ok ? 1 : 0;
  }
  const shown = Math.min(matching, state.jobRows);
  status.textContent = `${shown} of ${matching} matching jobs shown (${tbody.rows.length} in all)`;
  more.hidden = matching <= state.jobRows;
  document.body.dataset.filterMs = String(performance.now() - t0);
}

async function viewJobs() {
  const { body } = await api('/v1/jobs');
  const jobs = (body.jobs || []).slice().sort((a, b) => n(b.created_at_unix_ms) - n(a.created_at_unix_ms));
  const rows = jobs.map((j) => {
    const sites = jobSites(j).join(', ');
    return el('tr', { 'data-id': j.id, 'data-state': j.state,
                      'data-search': `${j.id} ${j.name} ${j.tenant} ${j.state} ${sites}`.toLowerCase() },
      el('td', { 'data-field': 'id' }, el('a', { href: `#/jobs/${encodeURIComponent(j.id)}`, text: j.id })),
      td(j.name, 'name'), td(j.tenant, 'tenant'), el('td', { 'data-field': 'state', class: `state-${j.state}`, text: j.state }),
      td((j.spec || {}).gpus || 0, 'gpus', true), td(sites, 'sites'), td(ago(j.created_at_unix_ms), 'age'));
  });
  const tbody = el('tbody', {}, rows);
  const status = el('p', { role: 'status', class: 'muted' });
  const more = el('button', { id: 'more-jobs', type: 'button', text: `Show ${JOB_ROWS} more`,
    onclick: () => { state.jobRows += JOB_ROWS; filterJobs(tbody, status, more); } });
  const search = el('input', { id: 'job-filter', type: 'search', value: state.filter, placeholder: 'id, name, tenant, site…',
    oninput: (e) => { state.filter = e.target.value; filterJobs(tbody, status, more); } });
  const pick = el('select', { id: 'job-state', onchange: (e) => { state.stateFilter = e.target.value; filterJobs(tbody, status, more); } },
    ['', 'PENDING', 'RESERVING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'].map((s) =>
      el('option', { value: s, selected: s === state.stateFilter, text: s || 'any state' })));
  filterJobs(tbody, status, more);
  return [el('h2', { text: `Jobs (${jobs.length})` }),
    el('div', { class: 'controls' }, el('label', {}, 'Filter', search), el('label', {}, 'State', pick)), status,
    el('table', { id: 'jobs-table' },
      el('thead', {}, el('tr', {}, ['ID', 'Name', 'Tenant', 'State', 'GPUs', 'Sites', 'Age'].map((h) => el('th', { scope: 'col', text: h })))),
      tbody), more];
}

async function cancelJob(id) {
  if (!window.confirm(`Cancel job ${id}? Its ranks are stopped at every site.`)) return;
  try {
    await api(`/v1/jobs/${encodeURIComponent(id)}:cancel`, { method: 'POST' });
    refresh();
  } catch (err) { showError(err); }
}

function logsPanel(id, ranks) {
  if (!state.logs || state.logs.id !== id) state.logs = { id, rank: 0, offset: 0, text: '' };
  const lg = state.logs;
  const pre = el('pre', { class: 'logs', id: 'rank-logs', tabindex: '0', 'aria-label': `output of rank ${lg.rank}`, text: lg.text });
  const pick = el('select', { id: 'log-rank', onchange: (e) => {
    state.logs = { id, rank: Number(e.target.value), offset: 0, text: '' };
    refresh();
  } }, (ranks.length ? ranks : [0]).map((r) => el('option', { value: r, selected: r === lg.rank, text: `rank ${r}` })));
  return [el('h3', { text: 'Logs' }), el('div', { class: 'controls' }, el('label', {}, 'Rank', pick)), pre];
}

async function followLogs(id) {
  const lg = state.logs;
  if (!lg || lg.id !== id) return;
  for (let i = 0; i < 4; i++) {  // up to 4 MiB per refresh
    const { body, headers } = await api(`/v1/jobs/${encodeURIComponent(id)}/logs?rank=${lg.rank}&offset=${lg.offset}`);
    if (!body.length) break;
    lg.text = (lg.text + body).slice(-1048576);  // the page keeps the last MiB
    lg.offset = Number(headers.get('X-Fedgate-Next-Offset'));
  }
}

async function viewJob(id) {
  const [job, vc] = await Promise.all([api(`/v1/jobs/${encodeURIComponent(id)}`), api(`/v1/jobs/${encodeURIComponent(id)}/vc`)]);
  const j = job.body.job;
  const run = vc.body;
  const history = state.jobStates.get(id) || [];
  const key = `${j.state} (attempt ${j.attempt})`;
  if (!history.length || history[history.length - 1].key !== key) history.push({ key, at: new Date().toISOString(), reason: j.reason });
  state.jobStates.set(id, history);
  const sites = run.sites || [];
  const world = n(run.world_size) || 1;
  const bars = sites.map((s) => {
    const fill = el('div', { class: 'fill' });
    fill.style.width = `${(100 * s.ranks.length) / world}%`;
    return el('div', { class: 'bar', 'data-site': s.site }, el('span', { text: `${s.site}: ${s.ranks.length} rank${s.ranks.length === 1 ? '' : 's'}` }), fill);
  });
  const ranks = sites.flatMap((s) => s.ranks.map((r) => ({ site: s.site, ...r }))).sort((a, b) => n(a.rank) - n(b.rank));
  const rankRows = ranks.map((r) => el('tr', { 'data-site': r.site },
    td(n(r.rank), 'rank', true), td(r.site, 'site'), td(r.node, 'node'), td(n(r.gpu), 'gpu', true),
    td(n(r.local_rank), 'local_rank', true), td(n(r.group_rank), 'group_rank', true)));
  // A waiting job's live dry run, else the explanation kept with its world.
  const live = (j.placement || {}).explanation || [];
  const decisions = live.length ? live : (run.placement || []);
  const summary = live.length ? (j.placement || {}).summary : run.placement_summary;
  const expl = decisions.map((d) => el('li', { 'data-site': d.site }, el('strong', { text: d.site }), `: ${d.reason || (d.used ? 'used' : 'not used')}`));
  if (ranks.length) await followLogs(id);  // a job with no world yet has no logs to ask for
  return [el('h2', {}, 'Job ', el('span', { id: 'job-id', text: j.id })),
    TERMINAL.has(j.state) ? null : el('p', {}, el('button', { class: 'danger', id: 'cancel-job', onclick: () => cancelJob(j.id), text: 'Cancel job' })),
    el('dl', { class: 'summary' },
      el('dt', { text: 'Name' }), el('dd', { text: j.name }),
      el('dt', { text: 'Tenant' }), el('dd', { text: j.tenant }),
      el('dt', { text: 'State' }), el('dd', { id: 'job-state', class: `state-${j.state}`, text: j.state }),
      el('dt', { text: 'Attempt' }), el('dd', { text: j.attempt }),
      el('dt', { text: 'Reason' }), el('dd', { text: j.reason || '—' }),
      el('dt', { text: 'GPUs' }), el('dd', { text: (j.spec || {}).gpus || 0 }),
      el('dt', { text: 'Submitted' }), el('dd', { text: `${new Date(n(j.created_at_unix_ms)).toISOString()} (${ago(j.created_at_unix_ms)} ago)` }),
      el('dt', { text: 'World' }), el('dd', { text: ranks.length ? `${run.world_size} ranks, master ${run.master_addr}:${run.master_port}, epoch ${run.epoch}, restart ${n(run.restart)}` : 'not started' })),
    el('h3', { text: 'World by site' }), el('div', { class: 'bars', id: 'world-bars' }, bars),
    table('ranks-table', ['Rank', 'Site', 'Node', 'GPU', 'Local rank', 'Group'], rankRows),
    el('h3', { text: 'Placement' }),
    el('p', { id: 'placement-summary', text: summary || (live.length ? '' : 'Not placed yet.') }), el('ul', { id: 'placement' }, expl),
    el('h3', { text: 'State history' }),
    el('p', { class: 'muted', text: 'State changes seen while this page is open (job events are not served by this federation yet).' }),
    el('ol', { id: 'job-history' }, history.map((h) => el('li', { text: `${h.at}: ${h.key}${h.reason ? ` — ${h.reason}` : ''}` }))),
    logsPanel(j.id, ranks.map((r) => n(r.rank)))];
}

async function viewQueue() {
  const [pending, quotas] = await Promise.all([api('/v1/jobs?state=PENDING'), api('/v1/quotas')]);
  // Guaranteed before spot, then oldest first (the scheduler's fair share may
  // still pick another order; the reason column says what each one waits for).
  const rank = (j) => (((j.spec || {}).priority || 'guaranteed') === 'spot' ? 1 : 0);
  const jobs = (pending.body.jobs || []).slice().sort((a, b) =>
    rank(a) - rank(b) || n(a.created_at_unix_ms) - n(b.created_at_unix_ms));
  const rows = jobs.map((j, i) => el('tr', { 'data-id': j.id },
    td(i + 1, 'position', true), el('td', {}, el('a', { href: `#/jobs/${encodeURIComponent(j.id)}`, text: j.id })),
    td(j.tenant, 'tenant'), td((j.spec || {}).priority || 'guaranteed', 'priority'), td((j.spec || {}).gpus || 0, 'gpus', true),
    td(ago(j.created_at_unix_ms), 'waiting'), td(j.reason, 'reason')));
  const qrows = (quotas.body.quotas || []).map((q) => el('tr', { 'data-tenant': q.tenant },
    td(q.tenant, 'tenant'), td(q.home, 'home'), td(q.gpus, 'gpus', true), td(q.borrow, 'borrow', true),
    td(Object.entries(q.models || {}).map(([m, g]) => `${m} ${g}`).join(', '), 'models'),
    td(q.used_gpus, 'used_gpus', true), td(q.borrowed_gpus, 'borrowed_gpus', true), td(q.error || '', 'error')));
  return [el('h2', { text: `Queue (${jobs.length} pending)` }),
    table('queue-table', ['#', 'Job', 'Tenant', 'Priority', 'GPUs', 'Waiting', 'Why it waits'], rows,
      'Pending jobs, guaranteed before spot, then by submit time'),
    jobs.length ? null : el('p', { text: 'Nothing waits.' }),
    el('h3', { text: 'Quotas' }),
    table('quotas-table', ['Tenant', 'Home site', 'Nominal GPUs', 'May borrow', 'Per model', 'Used', 'Borrowed', 'Problem'], qrows),
    qrows.length ? null : el('p', { text: 'No quota limits: no site governs these tenants.' })];
}

async function viewUsage() {
  const since = encodeURIComponent(state.usageSince);
  const [byTenant, bySite] = await Promise.all([api(`/v1/usage?by=tenant&since=${since}`), api(`/v1/usage?by=site&since=${since}`)]);
  const part = (doc, key, id) => {
    const rows = (doc.body.usage || []).map((u) => el('tr', { [`data-${key}`]: u[key] },
      td(u[key], key), td(fmt(n(u.gpu_seconds) / 3600, 3), 'gpu_hours', true), td(fmt(u.gpu_seconds, 1), 'gpu_seconds', true),
      td(fmt(u.cost, 2), 'cost', true)));
    const usage = doc.body.usage || [];
    return [el('h3', { text: `By ${key}` }),
      barChart(`GPU-hours by ${key}`, usage.map((u) => u[key]), [{ label: 'GPU-hours', data: usage.map((u) => n(u.gpu_seconds) / 3600) }], id),
      table(id, [key === 'tenant' ? 'Tenant' : 'Site', 'GPU-hours', 'GPU-seconds', 'Cost'], rows),
      usage.length ? null : el('p', { text: 'No usage in this window.' })];
  };
  const pick = el('select', { id: 'usage-since', onchange: (e) => { state.usageSince = e.target.value; refresh(); } },
    [['1h', 'last hour'], ['24h', 'last 24 hours'], ['168h', 'last 7 days'], ['720h', 'last 30 days']].map(([v, t]) =>
      el('option', { value: v, selected: v === state.usageSince, text: t })));
  const unreachable = byTenant.body.unreachable_sites || [];
  return [el('h2', { text: 'Usage' }),
    el('div', { class: 'controls' }, el('label', {}, 'Window', pick)),
    el('p', { class: 'muted', text: `From ${byTenant.body.since || 'the beginning'} to ${byTenant.body.until}` }),
    unreachable.length ? el('p', { class: 'error', text: `Not counted (unreachable): ${unreachable.join(', ')}` }) : null,
    part(byTenant, 'tenant', 'usage-tenant'), part(bySite, 'site', 'usage-site')];
}

async function viewNodes() {
  const { body } = await api('/v1/nodes');
  const rows = (body.nodes || []).map((x) => el('tr', { 'data-node': x.name },
    td(x.name, 'name'), td(x.gpu_model, 'gpu_model'), td(x.gpus, 'gpus', true), td(x.free_gpus, 'free_gpus', true),
    td((x.unhealthy_gpus || []).join(', ') || 'none', 'unhealthy_gpus'), td(x.cordoned ? 'cordoned' : 'schedulable', 'cordoned'),
    td(x.running_slices, 'running_slices', true)));
  return [el('h2', { text: `Nodes of ${state.session.site}` }),
    table('nodes-table', ['Node', 'GPU model', 'GPUs', 'Free', 'Unhealthy GPUs', 'Scheduling', 'Running slices'], rows)];
}

// --- routing ---------------------------------------------------------------

function route() {
  const h = decodeURIComponent(location.hash.replace(/^#/, ''));
  const m = h.match(/^\/jobs\/(.+)$/);
  if (m) return { name: 'job', id: m[1], nav: '#/jobs' };
  const views = ['sites', 'links', 'jobs', 'queue', 'usage'];
  if (state.session && state.session.role === 'admin') views.push('nodes');
  const name = h.replace(/^\//, '');
  return views.includes(name) ? { name, nav: `#/${name}` } : { name: 'sites', nav: '#/sites' };
}

const VIEWS = { sites: viewSites, links: viewLinks, jobs: viewJobs, queue: viewQueue, usage: viewUsage, nodes: viewNodes };

async function refresh(focus) {
  const gen = ++state.gen;
  clearTimeout(state.timer);
  const r = route();
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === r.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const main = document.getElementById('main');
  try {
    const parts = r.name === 'job' ? await viewJob(r.id) : await VIEWS[r.name]();
    if (gen !== state.gen) return;  // a newer refresh or navigation won
    // Keep the focus and caret of the filter box across a refresh.
    const active = document.activeElement && document.activeElement.id;
    const caret = active === 'job-filter' ? document.activeElement.selectionStart : null;
    destroyCharts();
    main.replaceChildren(...parts.flat().filter(Boolean));
    const pre = document.getElementById('rank-logs');
    if (pre) pre.scrollTop = pre.scrollHeight;
    if (active && document.getElementById(active)) {
      const again = document.getElementById(active);
      again.focus();
      if (caret !== null) again.setSelectionRange(caret, caret);
    } else if (focus) {
      main.focus();
    }
    showError(null);
    document.getElementById('updated').textContent = `Updated ${new Date().toLocaleTimeString()}`;
    if (!document.body.dataset.rendered) document.body.dataset.rendered = String(performance.now());
    document.body.dataset.view = r.name;
  } catch (err) {
    if (gen === state.gen) showError(err);
  }
  if (gen === state.gen) state.timer = setTimeout(() => refresh(false), r.name === 'sites' ? SITES_REFRESH_MS : REFRESH_MS);
}

function loadChartJs() {
  return new Promise((resolve) => {
    const s = el('script', { src: '/vendor/chart.js' });
    s.addEventListener('load', () => resolve(true));
    s.addEventListener('error', () => resolve(false));
    document.head.append(s);
  });
}

async function start() {
  try {
    state.session = (await api('/console/session')).body;
  } catch (err) {
    showError(err);
    return;
  }
  const s = state.session;
  document.getElementById('who').textContent = `${s.identity} via ${s.gateway}`;
  document.getElementById('nav-nodes').hidden = s.role !== 'admin';
  if (s.chart) await loadChartJs();
  if (!window.Chart) {
    const note = document.getElementById('notice');
    note.textContent = `No charts: ${s.chart_missing || 'Chart.js did not load'}.`;
    note.hidden = false;
  }
  window.addEventListener('hashchange', () => refresh(true));
  refresh(false);
}

start();
