// "Propose a rule": for a denial, the profile lines that would allow it,
// worded from the denial's reason (the option, by its profile key, and
// the entry the proxy named), never from the name alone: a name that is
// already allowed and was refused for where it leads (a non-public
// address, the host itself) is proposed the address range or host port
// its reason names, a request refused by the name's request rules a
// request rule. An allowlist entry can be applied to the running sandbox
// at once (the daemon's live egress change, PATCH
// /v1/sandboxes/{id}/egress); the other options are lines for the
// profile.

import { api, enc } from './api.js';
import { h, toast } from './dom.js';

export function entryFor(name, port) {
  return !port || port === 443 || port === 80 ? name : `${name}:${port}`;
}

const DOMAINS = 'egress.domains';

// What would allow a denied connection event: { field, value, name }, or
// null when no entry of any option would (a caller's entry that reaches
// public addresses only, a name that does not resolve, a used-up quota:
// the event's remedy says what there is to say).
export function proposalFor(e) {
  if (e.event !== 'connection' || e.allowed || !e.name) return null;
  const r = e.reason;
  // A log written before reasons were recorded: the name's entry.
  if (!r) return { field: DOMAINS, value: entryFor(e.name, e.protocol === 'dns' ? null : e.port), name: e.name };
  const field = r.field || (r.allow && r.allow.field);
  if (!field) return null;
  if (r.allow && r.allow.value) return { field: r.allow.field || field, value: String(r.allow.value), name: e.name };
  if (field === DOMAINS && e.protocol !== 'request') {
    return { field, value: entryFor(e.name, e.protocol === 'dns' ? null : e.port), name: e.name };
  }
  return null;
}

// `egress.allow_cidrs` and an entry as the profile's lines. An entry
// that YAML would read as something else (a request rule holds spaces)
// is quoted: JSON's quoting is YAML's.
function profileLines(field, value) {
  const [section, key] = field.split('.');
  const shown = /[\s#'"{}[\],&*!|>%@`]/.test(value) || /^[-?:]/.test(value) ? JSON.stringify(value) : value;
  return `${section}:\n  ${key}:\n    - ${shown}`;
}

const HINTS = {
  'egress.domains': 'Entry (NAME for ports 80 and 443, NAME:PORT for another, .NAME for its subdomains)',
  'egress.allow_cidrs': 'Address range the name resolved into (only the owner opens one)',
  'egress.host_ports': "Port of the host's own services (only the owner opens one)",
  'egress.allow_requests': 'Request rule (METHOD HOST/PATH)',
};

export function proposeRule(root, id, { field, value, name }) {
  const live = field === DOMAINS;
  const input = h('input', { id: 'rule-entry', value, 'aria-label': 'Entry', size: 40, dataset: { field } });
  const lines = h('pre', {});
  const show = () => (lines.textContent = profileLines(field, input.value.trim()));
  input.addEventListener('input', show);
  show();
  const apply = live
    ? h('button', { type: 'button', onclick: go }, `Allow it in ${id} now`)
    : h('span', { class: 'muted' }, 'A running sandbox takes allowlist names only: these lines are for the profile of new sandboxes.');
  const card = h('div', { class: 'card proposal', role: 'region', 'aria-label': `Rule for ${name}` },
    h('h3', {}, `A rule for ${name}`),
    h('label', {}, HINTS[field] || `Entry of ${field}`, input),
    h('p', {}, live
      ? 'The profile lines that allow it (add them to the profile to keep it for new sandboxes):'
      : `The profile lines that allow it (${field}, as the denial's reason names):`),
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
