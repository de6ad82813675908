// The snapshots (#/snapshots): the caller's own, as GET /v1/snapshots
// lists them (a token sees only those it made; the daemon decides, not
// this page), each with its source, size, when it was made and whether it
// keeps a VM's memory; a new sandbox started from one (POST
// /v1/snapshots/{name}/sandboxes), and a delete once confirmed.

import { api, enc } from './api.js';
import { h, ask, bytes, setText, toast } from './dom.js';
import { NAME_PATTERN, showRefusal } from './copies.js';

const COLUMNS = ['Name', 'Source', 'Size', 'Created', 'Memory', ''];

export function snapshotsPage(root) {
  const body = h('tbody', {});
  const table = h(
    'table',
    { class: 'snapshots' },
    h('caption', { class: 'sr-only' }, 'Your snapshots, refreshed every five seconds'),
    h('thead', {}, h('tr', {}, COLUMNS.map((c) => h('th', { scope: 'col' }, c)))),
    body,
  );

  // The form that starts a sandbox from the snapshot picked in the table.
  const heading = h('h2', { id: 'from-heading' });
  const name = h('input', {
    id: 'from-name', name: 'name', required: true, pattern: NAME_PATTERN, maxlength: 63, autocomplete: 'off',
    title: 'The new sandbox\'s name: lowercase letters, digits, "_", "." and "-"', 'aria-describedby': 'from-error',
  });
  const start = h('input', { id: 'from-start', type: 'checkbox', checked: true });
  const error = h('p', { id: 'from-error', class: 'error', role: 'alert' });
  const submit = h('button', { type: 'submit' }, 'Create');
  const form = h('form', { id: 'from-snapshot', class: 'card', hidden: true, 'aria-labelledby': 'from-heading', onsubmit: (e) => create(e) },
    heading,
    h('div', { class: 'fields' },
      h('label', {}, 'Sandbox name', name),
      h('label', { class: 'check' }, start, 'Start it'),
      submit,
      h('button', { type: 'button', class: 'link', onclick: () => (form.hidden = true) }, 'Cancel')),
    error);
  const made = h('div', { id: 'from-result', role: 'status', 'aria-live': 'polite' });

  root.append(
    h('h1', {}, 'Snapshots'),
    h('p', { class: 'muted' }, 'Your snapshots: a sandbox\'s files, home and options saved under a name (a VM\'s memory too, where it was kept). Take one from a sandbox\'s page.'),
    h('div', { class: 'scroll' }, table),
    form,
    made,
  );

  let picked = null;
  async function pick(s) {
    picked = s.name;
    setText(heading, `A new sandbox from ${s.name}`);
    setText(error, '');
    name.removeAttribute('aria-invalid');
    made.replaceChildren();
    form.hidden = false;
    name.value = await freeName(s.name);
    name.focus();
    name.select();
  }

  async function create(e) {
    e.preventDefault();
    setText(error, '');
    name.removeAttribute('aria-invalid');
    submit.disabled = true;
    try {
      const sb = await api('POST', `/v1/snapshots/${enc(picked)}/sandboxes`, { name: name.value.trim(), start: start.checked });
      form.hidden = true;
      made.replaceChildren(h('p', {}, 'Made ', h('a', { href: `#/s/${enc(sb.id)}`, id: 'from-made' }, sb.id), ` from ${picked} (${sb.state}).`));
    } catch (err) {
      showRefusal(error, err, 'No sandbox was made.', { '/name': name });
    } finally {
      submit.disabled = false;
    }
  }

  async function remove(s) {
    if (!ask`Delete snapshot ${s.name}? Sandboxes made from it keep their files; no new one can be made from it.`) return;
    try {
      await api('DELETE', `/v1/snapshots/${enc(s.name)}`);
      toast(`Deleted snapshot ${s.name}`);
      if (picked === s.name) form.hidden = true;
      refresh();
    } catch (err) {
      toast(err.message, true);
    }
  }

  function row(s) {
    const when = new Date(s.created_ms);
    return h(
      'tr',
      { dataset: { name: s.name, created: s.created_ms } },
      h('th', { scope: 'row' }, s.name),
      h('td', {}, h('a', { href: `#/s/${enc(s.source)}` }, s.source)),
      h('td', { class: 'num' }, bytes(s.bytes)),
      h('td', {}, h('time', { datetime: when.toISOString() }, when.toLocaleString([], { hour12: false }))),
      h('td', { class: 'memory' }, s.memory ? 'kept' : 'not kept'),
      h('td', { class: 'actions' },
        h('button', { type: 'button', class: 'from', onclick: () => pick(s) }, 'Start a sandbox from it'),
        h('button', { type: 'button', class: 'danger delete', onclick: () => remove(s) }, 'Delete')),
    );
  }

  let timer = null;
  let alive = true;
  async function refresh() {
    clearTimeout(timer);
    try {
      const { snapshots } = await api('GET', '/v1/snapshots');
      if (!alive) return;
      // A snapshot listed already keeps its row (and the focus on one of
      // its buttons); a name made again is a new row.
      const old = new Map([...body.querySelectorAll('tr[data-name]')].map((tr) => [`${tr.dataset.name}@${tr.dataset.created}`, tr]));
      const rows = snapshots.map((s) => old.get(`${s.name}@${s.created_ms}`) || row(s));
      body.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', { colspan: COLUMNS.length, class: 'muted' }, 'No snapshots yet.'))]));
      if (picked && !snapshots.some((s) => s.name === picked)) form.hidden = true;
    } catch (err) {
      if (alive) body.replaceChildren(h('tr', {}, h('td', { colspan: COLUMNS.length, class: 'error' }, err.message)));
    }
    if (alive) timer = setTimeout(refresh, 5000);
  }
  refresh();
  return () => {
    alive = false;
    clearTimeout(timer);
  };
}

// A name no sandbox the caller sees has: SNAPSHOT-1, -2, ... (a
// suggestion: the daemon refuses a taken one, which the form shows).
async function freeName(snapshot) {
  let taken = new Set();
  try {
    taken = new Set((await api('GET', '/v1/sandboxes')).sandboxes.map((s) => s.id));
  } catch {
    /* the daemon's answer to the create says */
  }
  const stem = snapshot.slice(0, 56);
  for (let k = 1; k < 1000; k++) {
    if (!taken.has(`${stem}-${k}`)) return `${stem}-${k}`;
  }
  return '';
}
