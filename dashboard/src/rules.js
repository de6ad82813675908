// "Propose a rule": for a denial, the profile lines that would allow it,
// worded from the denial's reason (the option, by its profile key, and
// the entry the proxy named), never from the name alone: a name that is
// already allowed and was refused for where it leads (a non-public
// address, the host itself) is proposed the address range or host port
// its reason names, a request refused by the name's request rules a
// request rule. Only an option a running sandbox takes (the allowlist's
// names: the daemon's live egress change, PATCH
// /v1/sandboxes/{id}/egress) is proposed, with an entry to edit and
// apply; any other (an owner-only option such as a secret's plain port,
// which no running sandbox takes) is shown as the words of what would be
// added to the profile, with nothing to apply.

import { api, enc } from './api.js';
import { h, lines as textLines, toast } from './dom.js';

export function entryFor(name, port) {
  return !port || port === 443 || port === 80 ? name : `${name}:${port}`;
}

// The daemon's field table (GET /v1/fields: each option's profile key,
// kind and shape, and which one a running sandbox's allowlist change
// takes), asked once a page: no key of an option is written here, so a
// key renamed in the table is renamed in what the dashboard proposes.
let table = null;
export function fieldTable() {
  if (!table) {
    table = api('GET', '/v1/fields').then(
      (r) => r.fields,
      (err) => {
        table = null;
        throw err;
      },
    );
  }
  return table;
}

// The row a running sandbox's allowlist change (PATCH
// /v1/sandboxes/{id}/egress) takes entries of.
export function liveRow(rows) {
  return rows.find((f) => f.live) || null;
}

// What would allow a denied connection event, as one of the table's
// `rows`: { row, value, name }, or null when no entry of any option would
// (a caller's entry that reaches public addresses only, a name that does
// not resolve, a used-up quota: the event's remedy says what there is to
// say) or the table has no row for the option the reason names.
export function proposalFor(e, rows) {
  if (e.event !== 'connection' || e.allowed || !e.name) return null;
  const r = e.reason;
  const entry = () => entryFor(e.name, e.protocol === 'dns' ? null : e.port);
  // A log written before reasons were recorded: the name's entry.
  if (!r) {
    const row = liveRow(rows);
    return row ? { row, value: entry(), name: e.name } : null;
  }
  const byKey = (key) => rows.find((f) => f.key === key) || null;
  const row = byKey(r.field || (r.allow && r.allow.field));
  if (r.allow && r.allow.value) {
    const named = byKey(r.allow.field) || row;
    return named ? { row: named, value: String(r.allow.value), name: e.name } : null;
  }
  if (row && row.live && e.protocol !== 'request') return { row, value: entry(), name: e.name };
  return null;
}

// An entry as YAML reads it: quoted (JSON's quoting is YAML's) where it
// would read as something else (a request rule holds spaces).
function scalar(value) {
  return /[\s#'"{}[\],&*!|>%@`]/.test(value) || /^[-?:]/.test(value) ? JSON.stringify(value) : value;
}

// The profile's lines that give `row` the entry `value`: its key's parts
// as nested sections, and the entry as its shape wants it (an item of a
// list, a map's NAME=VALUE as a key, a single value after the key).
export function profileLines(row, value) {
  const parts = row.key.split('.');
  const last = parts.pop();
  const lines = parts.map((p, i) => `${'  '.repeat(i)}${p}:`);
  const pad = '  '.repeat(parts.length);
  if (row.shape === 'list') {
    lines.push(`${pad}${last}:`, `${pad}  - ${scalar(value)}`);
  } else if (row.shape === 'map') {
    const at = value.indexOf('=');
    lines.push(`${pad}${last}:`, at > 0 ? `${pad}  ${scalar(value.slice(0, at))}: ${scalar(value.slice(at + 1))}` : `${pad}  ${scalar(value)}:`);
  } else {
    lines.push(`${pad}${last}: ${scalar(value)}`);
  }
  return lines.join('\n');
}

// What a denial whose option no running sandbox takes would need, in
// words: the profile lines, and whose they are to add (an owner-only
// option's, the host's owner; another's, a new sandbox's profile).
export function profileWords({ row, value }) {
  const whose = row.reach === 'sandbox'
    ? `A running sandbox takes allowlist names only: a new sandbox's profile would add (${row.key}):`
    : `Only the host's owner sets ${row.key}, in a profile of new sandboxes; the owner would add:`;
  return h('div', { class: 'owner-rule', dataset: { field: row.key } },
    h('span', {}, whose),
    h('pre', {}, textLines(profileLines(row, value))));
}

// A proposal of an entry for `row`, the allowlist a running sandbox
// takes: editable, with its profile lines, and applied to sandbox `id`
// now by its button.
export function proposeRule(root, id, { row, value, name }) {
  const input = h('input', { id: 'rule-entry', value, 'aria-label': 'Entry', size: 40, dataset: { field: row.key } });
  const lines = h('pre', {});
  const show = () => lines.replaceChildren(textLines(profileLines(row, input.value.trim())));
  input.addEventListener('input', show);
  show();
  const apply = h('button', { type: 'button', onclick: go }, `Allow it in ${id} now`);
  const card = h('div', { class: 'card proposal', role: 'region', 'aria-label': `Rule for ${name}` },
    h('h3', {}, `A rule for ${name}`),
    h('label', { title: row.doc }, `Entry of ${row.key} (${row.ty})`, input),
    h('p', { class: 'muted' }, row.doc),
    h('p', {}, 'The profile lines that allow it (add them to the profile to keep it for new sandboxes):'),
    lines,
    h('p', {}, apply, ' ', h('button', { type: 'button', class: 'link', onclick: () => card.remove() }, 'Close')));
  root.replaceChildren(card);
  input.focus();
  async function go() {
    const entry = input.value.trim();
    try {
      const r = await api('PATCH', `/v1/sandboxes/${enc(id)}/egress`, { allow: [entry] });
      toast(`${id} now allows: ${r.allow.join(', ')}`);
      card.remove();
    } catch (err) {
      toast(err.message, true);
    }
  }
}
