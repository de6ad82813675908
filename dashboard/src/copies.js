// A sandbox's copies, from its page: a snapshot of its state under a
// name (POST /v1/sandboxes/{id}/snapshots) and a fork into new sandboxes
// (POST /v1/sandboxes/{id}/fork). A refusal is the daemon's problem, led
// by what it means here (the name is taken, a limit is reached), said
// beside the form and marked on the input at fault; nothing was made
// then, and the page says so. What a copy carries is the daemon's word
// (`memory`, `memory_why`), never guessed here.

import { api, enc } from './api.js';
import { h, bytes, setText } from './dom.js';

// The names the daemon's store takes, for a snapshot and a sandbox alike
// (`[a-z0-9][a-z0-9_.-]{0,62}`; it refuses any other, saying why). A
// bare `-` at the end of a class is an error under the `v` flag a
// pattern is compiled with: escaped.
export const NAME_PATTERN = '[a-z0-9][a-z0-9_.\\-]{0,62}';
const NAME_RULE = 'lowercase letters, digits, "_", "." and "-", starting with a letter or a digit';

// The most sandboxes one fork makes: the API's bound (it refuses more,
// which the form would then show).
export const MAX_FORK = 16;

// What a refusal means, by the problem's stable code (or its status).
const LEADS = {
  conflict: 'That name is taken',
  quota: 'A limit is reached',
  not_found: 'Not found',
  damaged: 'The snapshot is damaged',
  unsupported_entry: 'Its files cannot be copied',
  paused: 'The sandbox is paused',
};
const FIELD_LEADS = { '/name': 'Not a valid name', '/count': 'Not a valid count' };

// A refusal worded for the page: what it means, the daemon's own
// message (what is wrong and what to do), and what became of the request.
export function refusal(err, outcome) {
  const lead = LEADS[err.code] || (err.status === 429 ? LEADS.quota : FIELD_LEADS[err.field]) || 'Refused';
  return `${lead}: ${String(err.message).replace(/[.\s]+$/, '')}. ${outcome}`;
}

// Show a refusal under a form, on the input the problem names.
export function showRefusal(error, err, outcome, inputs) {
  setText(error, refusal(err, outcome));
  for (const [pointer, input] of Object.entries(inputs)) {
    const at = err.field === pointer || (pointer === '/name' && err.code === 'conflict');
    input.toggleAttribute('aria-invalid', at);
    if (at) input.focus();
  }
}

function clearRefusal(error, inputs) {
  setText(error, '');
  for (const input of Object.values(inputs)) input.removeAttribute('aria-invalid');
}

// The forms and their answers, and the buttons that open them (made
// anew whenever the page redraws its actions).
export function copiesPanel(id) {
  const result = h('div', { id: 'copy-result', role: 'status', 'aria-live': 'polite' });

  const snapName = h('input', {
    id: 'snapshot-name', name: 'name', required: true, pattern: NAME_PATTERN, maxlength: 63,
    autocomplete: 'off', title: `A snapshot's name: ${NAME_RULE}`, 'aria-describedby': 'snapshot-error',
  });
  const snapError = h('p', { id: 'snapshot-error', class: 'error', role: 'alert' });
  const snapSubmit = h('button', { type: 'submit' }, 'Save snapshot');
  const snapForm = h('form', { id: 'snapshot-form', class: 'copy', hidden: true, onsubmit: (e) => snapshot(e) },
    h('h2', {}, 'Snapshot'),
    h('p', { class: 'muted' }, 'Saves its workspace changes, its home and its options under a name (a VM\'s memory too, where it can be paused to disk); new sandboxes can start from it. A running sandbox is paused for the moment of the copy.'),
    h('div', { class: 'fields' },
      h('label', {}, 'Name', snapName),
      snapSubmit,
      h('button', { type: 'button', class: 'link', onclick: close }, 'Cancel')),
    snapError);

  const count = h('input', {
    id: 'fork-count', name: 'count', type: 'number', required: true, min: 1, max: MAX_FORK, step: 1, value: 1,
    'aria-describedby': 'fork-error',
  });
  const forkError = h('p', { id: 'fork-error', class: 'error', role: 'alert' });
  const forkSubmit = h('button', { type: 'submit' }, 'Fork');
  const forkForm = h('form', { id: 'fork-form', class: 'copy', hidden: true, onsubmit: (e) => fork(e) },
    h('h2', {}, 'Fork'),
    h('p', { class: 'muted' }, `New sandboxes, 1 to ${MAX_FORK}, each starting from its current files and options (a VM's memory too, where it can be paused to disk), each with its own name and nothing shared with the others. A running sandbox is paused for the moment of the copy and its forks are started.`),
    h('div', { class: 'fields' },
      h('label', {}, 'How many', count),
      forkSubmit,
      h('button', { type: 'button', class: 'link', onclick: close }, 'Cancel')),
    forkError);

  const panel = h('section', { id: 'copies', class: 'card copies', hidden: true, 'aria-label': 'Copies of this sandbox' }, snapForm, forkForm, result);

  function open(which) {
    panel.hidden = false;
    snapForm.hidden = which !== 'snapshot';
    forkForm.hidden = which !== 'fork';
    result.replaceChildren();
    clearRefusal(snapError, { '/name': snapName });
    clearRefusal(forkError, { '/count': count });
    (which === 'snapshot' ? snapName : count).focus();
  }

  function close() {
    panel.hidden = true;
    result.replaceChildren();
  }

  async function snapshot(e) {
    e.preventDefault();
    const name = snapName.value.trim();
    clearRefusal(snapError, { '/name': snapName });
    result.replaceChildren();
    snapSubmit.disabled = true;
    try {
      const s = await api('POST', `/v1/sandboxes/${enc(id)}/snapshots`, { name });
      snapName.value = '';
      snapForm.hidden = true;
      result.replaceChildren(h('p', { id: 'snapshot-saved' },
        'Saved snapshot ', h('strong', {}, s.name), ` (${bytes(s.bytes)}, `,
        s.memory ? 'its memory kept: a sandbox made from it goes on from its processes' : 'its files and options: a sandbox made from it runs none of its processes',
        '). ', h('a', { href: '#/snapshots' }, 'See the snapshots')));
    } catch (err) {
      showRefusal(snapError, err, 'Nothing was saved.', { '/name': snapName });
    } finally {
      snapSubmit.disabled = false;
    }
  }

  async function fork(e) {
    e.preventDefault();
    clearRefusal(forkError, { '/count': count });
    result.replaceChildren();
    forkSubmit.disabled = true;
    try {
      const r = await api('POST', `/v1/sandboxes/${enc(id)}/fork`, { count: Number(count.value) });
      forkForm.hidden = true;
      result.replaceChildren(
        h('p', {}, `Forked into ${r.sandboxes.length} new sandbox${r.sandboxes.length === 1 ? '' : 'es'}:`),
        h('ul', { id: 'forks' }, r.sandboxes.map((s) => h('li', {}, h('a', { href: `#/s/${enc(s.id)}` }, s.id), h('span', { class: 'muted' }, ` ${s.state}`)))),
        r.memory
          ? h('p', { id: 'fork-memory', dataset: { carried: 'true' } }, 'Its memory was carried: each goes on from its processes, with an identity of its own.')
          : h('p', { id: 'fork-memory', class: 'note', dataset: { carried: 'false' } },
            h('strong', {}, 'Memory not carried'), r.memory_why ? `: ${String(r.memory_why).replace(/[.\s]+$/, '')}. ` : '. ',
            'The new sandboxes have its files and options and run none of its processes.'),
      );
    } catch (err) {
      showRefusal(forkError, err, 'No sandbox was made.', { '/count': count });
    } finally {
      forkSubmit.disabled = false;
    }
  }

  const buttons = () => [
    h('button', { type: 'button', id: 'snapshot', title: 'Save its state under a name, to start new sandboxes from', onclick: () => open('snapshot') }, 'Snapshot'),
    h('button', { type: 'button', id: 'fork', title: 'Make new sandboxes from its current state', onclick: () => open('fork') }, 'Fork'),
  ];
  return { panel, buttons };
}
