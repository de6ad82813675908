// "Propose a rule": for a denied name, the profile lines that would
// allow it, and applying it to the running sandbox at once (the
// daemon's live egress change, PATCH /v1/sandboxes/{id}/egress).

import { api, enc } from './api.js';
import { h, toast } from './dom.js';

export function entryFor(name, port) {
  return !port || port === 443 || port === 80 ? name : `${name}:${port}`;
}

// A denied name's entry: as written in `egress.domains` (a name alone
// allows ports 80 and 443; NAME:PORT another port). A DNS denial does
// not say which port was wanted, so the entry is editable.
export function proposeRule(root, id, { name, port }) {
  const input = h('input', { id: 'rule-entry', value: entryFor(name, port), 'aria-label': 'Entry', size: 40 });
  const lines = h('pre', {});
  const apply = h('button', { type: 'button', onclick: go }, `Allow it in ${id} now`);
  const show = () => (lines.textContent = `egress:\n  domains:\n    - ${input.value.trim()}`);
  input.addEventListener('input', show);
  show();
  const card = h('div', { class: 'card proposal', role: 'region', 'aria-label': `Rule for ${name}` },
    h('h3', {}, `A rule for ${name}`),
    h('label', {}, 'Entry (NAME for ports 80 and 443, NAME:PORT for another, .NAME for its subdomains)', input),
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
