// "Propose a rule": for a denied name, the profile lines that would
// allow it, and applying it to the running sandbox at once (the
// daemon's live egress change, PATCH /v1/sandboxes/{id}/egress).

import { api, enc } from './api.js';
import { h, toast } from './dom.js';

export function entryFor(name, port) {
  return port === 443 || port === 80 ? name : `${name}:${port}`;
}

export function proposeRule(root, id, { name, port }) {
  const entry = entryFor(name, port);
  const lines = `egress:\n  domains:\n    - ${entry}`;
  const apply = h('button', { type: 'button', onclick: go }, `Allow ${entry} in ${id} now`);
  const card = h('div', { class: 'card proposal', role: 'region', 'aria-label': `Rule for ${entry}` },
    h('h3', {}, `A rule for ${entry}`),
    h('p', {}, 'The profile lines that allow it (add them to the profile to keep it for new sandboxes):'),
    h('pre', {}, lines),
    h('p', {}, apply, ' ', h('button', { type: 'button', class: 'link', onclick: () => card.remove() }, 'Close')));
  root.replaceChildren(card);
  apply.focus();
  async function go() {
    try {
      const r = await api('PATCH', `/v1/sandboxes/${enc(id)}/egress`, { allow: [entry] });
      toast(`${id} now allows: ${r.allow.join(', ')}`);
      card.remove();
    } catch (err) {
      toast(err.message, true);
    }
  }
}
