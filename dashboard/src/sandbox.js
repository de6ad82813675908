// One sandbox: its state and numbers, its actions (pause, resume, stop,
// start, a snapshot, a fork, delete), and tabs for its events, resource
// graphs, a terminal, the review of its changes, its files, and its
// desktop's screen.

import { api, enc } from './api.js';
import { h, age, ask, bytes, setText, toast } from './dom.js';
import { eventsView } from './events.js';
import { resourcesView } from './resources.js';
import { terminalView } from './terminal.js';
import { changesView } from './changes.js';
import { filesView } from './files.js';
import { desktopView } from './desktop.js';
import { copiesPanel } from './copies.js';

const TABS = [
  ['events', 'Events'],
  ['resources', 'Resources'],
  ['terminal', 'Terminal'],
  ['changes', 'Changes'],
  ['files', 'Files'],
  ['desktop', 'Desktop'],
];

export function sandboxPage(root, id, tab) {
  const stop = [];
  const facts = h('dl', { class: 'facts' });
  const actions = h('div', { class: 'actions' });
  const denied = h('dd', { id: 'denied-count' }, '0');
  const violations = h('dd', {}, '0');
  const samples = [];
  const copies = copiesPanel(id);
  root.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Sandboxes'), ' / '),
    h('h1', {}, id),
    h('div', { class: 'summary' }, facts, h('dl', { class: 'facts' }, h('dt', {}, 'Denied'), denied, h('dt', {}, 'Violations'), violations), actions),
    copies.panel,
  );
  const tablist = h('div', { role: 'tablist', 'aria-label': 'Sandbox views', class: 'tabs' });
  const panels = {};
  for (const [key, label] of TABS) {
    const b = h('button', {
      role: 'tab', id: `tab-${key}`, type: 'button', 'aria-controls': `panel-${key}`,
      'aria-selected': key === tab ? 'true' : 'false', tabindex: key === tab ? '0' : '-1',
      onclick: () => select(key), onkeydown: (e) => arrows(e, key),
    }, label);
    tablist.append(b);
    panels[key] = h('section', { role: 'tabpanel', id: `panel-${key}`, 'aria-labelledby': `tab-${key}`, hidden: key !== tab, tabindex: '0' });
  }
  root.append(tablist, ...Object.values(panels));

  const started = new Set();
  function open(key) {
    if (started.has(key)) return;
    started.add(key);
    const p = panels[key];
    if (key === 'events') stop.push(eventsView(p, id));
    if (key === 'resources') stop.push(resourcesView(p, samples));
    if (key === 'terminal') stop.push(terminalView(p, id));
    if (key === 'changes') stop.push(changesView(p, id));
    if (key === 'files') stop.push(filesView(p, id));
    if (key === 'desktop') stop.push(desktopView(p, id));
  }
  function select(key) {
    for (const [k] of TABS) {
      const b = document.getElementById(`tab-${k}`);
      b.setAttribute('aria-selected', k === key ? 'true' : 'false');
      b.tabIndex = k === key ? 0 : -1;
      panels[k].hidden = k !== key;
    }
    history.replaceState(null, '', `#/s/${enc(id)}/${key}`);
    open(key);
    document.getElementById(`tab-${key}`).focus();
    panels[key].dispatchEvent(new Event('shown'));
  }
  function arrows(e, key) {
    const i = TABS.findIndex(([k]) => k === key);
    const n = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
    if (n) {
      e.preventDefault();
      select(TABS[(i + n + TABS.length) % TABS.length][0]);
    }
  }
  open(tab);

  let timer = null;
  let alive = true;
  let state = null;
  async function refresh() {
    clearTimeout(timer);
    try {
      const s = await api('GET', `/v1/sandboxes/${enc(id)}`);
      if (!alive) return;
      // The daemon's counts, from the sandbox's whole audit log.
      // Denied names and refused programs alike (the API counts each).
      setText(denied, s.denied_connections + (s.refused_execs ?? 0));
      setText(violations, s.violations);
      samples.push({ t: Date.now(), memory: s.memory_bytes, egress: s.egress_bytes, processes: s.processes, cpu: s.cpu_usec });
      if (samples.length > 300) samples.shift();
      facts.replaceChildren(
        h('dt', {}, 'State'), h('dd', {}, h('span', { class: `state ${s.state}`, id: 'sandbox-state' }, s.state)),
        h('dt', {}, 'Profile'), h('dd', {}, s.profile || '–'),
        h('dt', {}, 'Age'), h('dd', {}, age(s.age_seconds)),
        h('dt', {}, 'Memory'), h('dd', {}, bytes(s.memory_bytes)),
        h('dt', {}, 'Egress'), h('dd', {}, bytes(s.egress_bytes)),
        h('dt', {}, 'Processes'), h('dd', {}, s.processes),
        h('dt', {}, 'Workspace'), h('dd', {}, h('code', {}, s.workspace || '–')),
      );
      if (s.state !== state) {
        state = s.state;
        // A running sandbox can be paused (its processes frozen in
        // place, their memory kept) and a paused one resumed or stopped.
        const live = s.state === 'running' || s.state === 'paused';
        // (The DOM's own replaceChildren writes a null as the text
        // "null": what does not apply is left out.)
        actions.replaceChildren(...[
          s.state === 'running'
            ? h('button', { type: 'button', id: 'pause', title: 'Freeze its processes where they are; their memory is kept', onclick: () => act('pause') }, 'Pause')
            : null,
          s.state === 'paused'
            ? h('button', { type: 'button', id: 'resume', title: 'Let its processes go on where they were', onclick: () => act('resume') }, 'Resume')
            : null,
          live
            ? h('button', { type: 'button', id: 'stop', onclick: () => act('stop') }, 'Stop')
            : h('button', { type: 'button', id: 'start', onclick: () => act('start') }, 'Start'),
          // A snapshot or a fork of any state: a running one is paused
          // for the copy by the daemon.
          ...copies.buttons(),
          h('button', { type: 'button', class: 'danger', onclick: () => act('delete') }, 'Delete'),
        ].filter(Boolean));
      }
      for (const p of Object.values(panels)) p.dispatchEvent(new CustomEvent('sample', { detail: s }));
    } catch (err) {
      facts.replaceChildren(h('dd', { class: 'error' }, err.message));
    }
    if (alive) timer = setTimeout(refresh, 2000);
  }
  async function act(what) {
    try {
      if (what === 'delete') {
        if (!ask`Delete sandbox ${id} and its changes?`) return;
        await api('DELETE', `/v1/sandboxes/${enc(id)}`);
        location.hash = '#/';
        return;
      }
      await api('POST', `/v1/sandboxes/${enc(id)}/${what}`, {});
      toast(`${id}: ${what}`);
      refresh();
    } catch (err) {
      toast(err.message, true);
    }
  }
  refresh();
  return () => {
    alive = false;
    clearTimeout(timer);
    for (const f of stop) f && f();
  };
}
