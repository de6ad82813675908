// The sandboxes: a table that refreshes itself, creating one from a
// profile picked from the daemon's list, stopping and deleting.

import { api, enc } from './api.js';
import { h, age, ask, bytes, toast } from './dom.js';

const COLUMNS = ['Name', 'Profile', 'Backend', 'State', 'Age', 'CPU', 'Memory', 'Egress', 'Denied', 'Violations', ''];

export function sandboxesPage(root) {
  const body = h('tbody', {});
  const table = h(
    'table',
    { class: 'sandboxes' },
    h('caption', { class: 'sr-only' }, 'Sandboxes, refreshed every two seconds'),
    h('thead', {}, h('tr', {}, COLUMNS.map((c) => h('th', { scope: 'col' }, c)))),
    body,
  );
  // A pattern is compiled with the `v` flag, where a bare `-` at the end
  // of a class is an error (the browser then reports it and checks
  // nothing): escaped.
  const name = h('input', { id: 'new-name', name: 'name', placeholder: 'optional', pattern: '[A-Za-z0-9._\\-]*' });
  // The profiles a caller may name (GET /v1/profiles), each with its
  // line; "default" creates with none.
  const profile = h('select', { id: 'new-profile', name: 'profile' }, h('option', { value: '' }, 'default'));
  loadProfiles(profile);
  const workspace = h('input', { id: 'new-workspace', name: 'workspace', placeholder: 'none' });
  // The options, from the daemon's field table (GET /v1/fields): each
  // input carries its field's JSON pointer and shape, and the body is
  // built from those, never from keys spelled here.
  const options = h('div', { class: 'fields options' });
  loadFields(options);
  const form = h(
    'form',
    { class: 'create card', onsubmit: (e) => create(e) },
    h('h2', {}, 'New sandbox'),
    h('div', { class: 'fields' },
      h('label', {}, 'Name', name),
      h('label', {}, 'Profile', profile),
      h('label', {}, 'Workspace', workspace),
      h('button', { type: 'submit' }, 'Create')),
    options,
  );
  const cpu = new Map();
  root.append(h('h1', {}, 'Sandboxes'), h('div', { class: 'scroll' }, table), form);

  async function create(e) {
    e.preventDefault();
    const req = {};
    if (name.value) req.name = name.value;
    if (profile.value) req.profile = profile.value;
    if (workspace.value) req.workspace = workspace.value;
    const spec = specFrom(options);
    if (spec) req.spec = spec;
    try {
      const sb = await api('POST', '/v1/sandboxes', req);
      toast(`Created ${sb.id}`);
      name.value = '';
      for (const input of options.querySelectorAll('input')) input.value = '';
      refresh();
    } catch (err) {
      toast(err.message, true);
    }
  }

  async function act(what, id) {
    try {
      if (what === 'stop') await api('POST', `/v1/sandboxes/${enc(id)}/stop`, {});
      if (what === 'delete') {
        if (!ask`Delete sandbox ${id} and its changes?`) return;
        await api('DELETE', `/v1/sandboxes/${enc(id)}`);
      }
      if (what === 'start') await api('POST', `/v1/sandboxes/${enc(id)}/start`, {});
      toast(`${what}: ${id}`);
      refresh();
    } catch (err) {
      toast(err.message, true);
    }
  }

  function row(s) {
    const link = h('a', { href: `#/s/${enc(s.id)}` }, s.id);
    const running = s.state === 'running';
    return h(
      'tr',
      { dataset: { id: s.id, state: s.state } },
      h('th', { scope: 'row' }, link),
      h('td', {}, s.profile || '–'),
      h('td', {}, s.backend || '–'),
      h('td', {}, h('span', { class: `state ${s.state}` }, s.state)),
      h('td', {}, age(s.age_seconds)),
      h('td', { class: 'num' }, cpuText(s)),
      h('td', { class: 'num' }, bytes(s.memory_bytes)),
      h('td', { class: 'num' }, bytes(s.egress_bytes)),
      h('td', { class: 'num' }, s.denied_connections === undefined ? '–' : s.denied_connections + (s.refused_execs ?? 0)),
      h('td', { class: 'num' }, s.violations ?? '–'),
      h('td', { class: 'actions' },
        running
          ? h('button', { type: 'button', onclick: () => act('stop', s.id) }, 'Stop')
          : h('button', { type: 'button', onclick: () => act('start', s.id) }, 'Start'),
        h('button', { type: 'button', class: 'danger', onclick: () => act('delete', s.id) }, 'Delete')),
    );
  }

  // CPU as a share of one core, from the change of the cumulative time
  // between two refreshes.
  function cpuText(s) {
    if (s.cpu_usec === undefined || s.cpu_usec === null) return '–';
    const now = Date.now();
    const last = cpu.get(s.id);
    cpu.set(s.id, { t: now, u: s.cpu_usec });
    if (!last || now <= last.t) return '…';
    const share = (s.cpu_usec - last.u) / 1000 / (now - last.t);
    return `${Math.max(0, share * 100).toFixed(0)}%`;
  }

  let timer = null;
  let alive = true;
  async function refresh() {
    clearTimeout(timer);
    try {
      const list = await api('GET', '/v1/sandboxes');
      if (!alive) return;
      // A row whose state is the same keeps its buttons (and the focus on
      // one): only its figures are replaced.
      const old = new Map([...body.querySelectorAll('tr[data-id]')].map((tr) => [tr.dataset.id, tr]));
      const rows = list.sandboxes.map((s) => {
        const fresh = row(s);
        const kept = old.get(s.id);
        if (!kept || kept.dataset.state !== s.state) return fresh;
        [...fresh.children].slice(1, -1).forEach((cell, i) => kept.children[i + 1].replaceWith(cell));
        return kept;
      });
      body.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', { colspan: COLUMNS.length, class: 'muted' }, 'No sandboxes yet.'))]));
    } catch (err) {
      if (alive) body.replaceChildren(h('tr', {}, h('td', { colspan: COLUMNS.length, class: 'error' }, err.message)));
    }
    if (alive) timer = setTimeout(refresh, 2000);
  }
  refresh();
  return () => {
    alive = false;
    clearTimeout(timer);
  };
}

async function loadProfiles(select) {
  try {
    const { profiles } = await api('GET', '/v1/profiles');
    select.append(...profiles.map((p) => h('option', { value: p.name, title: p.description || '' }, p.description ? `${p.name} — ${p.description}` : p.name)));
  } catch (err) {
    toast(`The profiles could not be listed: ${err.message}`, true);
  }
}

// The options the form offers, by profile key, in this order: those the
// daemon's table has and a caller may set (reach `sandbox`).
const OFFERED = ['resources.memory', 'resources.cpus', 'resources.timeout', 'egress.domains'];
const EXAMPLE = { size: '512M', cores: '1.5', duration: '10m', count: '256' };

async function loadFields(root) {
  try {
    const { fields } = await api('GET', '/v1/fields');
    const rows = OFFERED.map((key) => fields.find((f) => f.key === key && f.reach === 'sandbox')).filter(Boolean);
    root.append(...rows.map((f) => {
      const placeholder = f.shape === 'list' ? 'comma-separated' : EXAMPLE[f.kind] || '';
      const input = h('input', { name: f.key, placeholder, title: f.doc, dataset: { json: f.json, shape: f.shape, kind: f.kind } });
      return h('label', { title: f.doc }, f.key, input);
    }));
  } catch (err) {
    toast(`The options could not be listed: ${err.message}`, true);
  }
}

// A profile document from the inputs that have a value, each put at its
// field's JSON pointer; a list field's text split at commas. Null when
// none has a value.
export function specFrom(root) {
  let spec = null;
  for (const input of root.querySelectorAll('input[data-json]')) {
    const text = input.value.trim();
    if (!text) continue;
    const { json, shape, kind } = input.dataset;
    let value = text;
    if (shape === 'list') value = text.split(',').map((v) => v.trim()).filter(Boolean);
    else if (['cores', 'count', 'port'].includes(kind) && /^[0-9]+(\.[0-9]+)?$/.test(text)) value = Number(text);
    spec = spec || {};
    const path = json.split('/').slice(1);
    let at = spec;
    for (const part of path.slice(0, -1)) at = at[part] = at[part] || {};
    at[path[path.length - 1]] = value;
  }
  return spec;
}
