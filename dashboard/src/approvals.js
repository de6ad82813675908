// Ask-mode questions: every page shows the waiting ones as a prompt
// (allow once, allow for this sandbox, always, deny); #/approvals lists
// them with the rule each would make.

import { api, enc } from './api.js';
import { h, clock, lines, setText, shownName, toast } from './dom.js';
import { entryFor, fieldTable, liveRow, profileLines } from './rules.js';

let timer = null;
let pending = [];
const listeners = new Set();

async function poll() {
  clearTimeout(timer);
  try {
    const r = await api('GET', '/v1/approvals');
    pending = r.approvals;
  } catch {
    pending = [];
  }
  draw();
  for (const f of listeners) f();
  timer = setTimeout(poll, 1500);
}

export function startPrompts() {
  poll();
}

export function stopPrompts() {
  clearTimeout(timer);
  pending = [];
  draw();
}

// A program the exec allowlist refused (protocol `exec`): its exec stays
// refused whatever the answer; "always" puts it on the allowlist of the
// sandbox's next start.
const isProgram = (q) => q.protocol === 'exec';
// The name and a held request's line are the sandbox's choice: shown
// escaped (shownName), never as raw text a bidi override could reorder.
const name = (q) => shownName(q.name);
const what = (q) => (isProgram(q) ? name(q) : `${name(q)}:${q.port}`);

async function answer(q, decision) {
  try {
    await api('POST', `/v1/approvals/${enc(q.id)}`, { decision });
    toast(`${what(q)} in ${q.sandbox}: ${decision.replace('_', ' ')}`);
  } catch (err) {
    toast(err.message, true);
  }
  poll();
}

// "Always" goes on the sandbox's allowlist (kept across its restarts)
// and shows the profile lines that keep it for new sandboxes too.
async function always(q) {
  await answer(q, 'allow_always');
  const row = liveRow(await fieldTable().catch(() => []));
  if (row) toast(`Add to the profile to keep it for new sandboxes: ${row.key}: [${shownName(entryFor(q.name, q.port))}]`);
}

// What is asked, in words: the request an ask rule holds (its method and
// path, the query's values redacted by the daemon) on its allowed name,
// or a name on no list.
function asked(q) {
  if (isProgram(q)) return [' may run ', h('code', {}, name(q)), '?'];
  if (q.request) return [' asks to send ', h('code', { class: 'held-request' }, shownName(q.request)), ' to ', h('code', {}, what(q))];
  return [' asks to reach ', h('code', {}, what(q)), ` (${q.protocol})`];
}

// A program's question: no "once" (a running sandbox's allowlist cannot
// widen, the daemon answers it as deny), the note says what an answer does.
function programPrompt(q, left) {
  return h('div', { class: 'prompt', role: 'alertdialog', 'aria-label': `Question from ${q.sandbox}`, dataset: { id: q.id } },
    h('p', {}, h('strong', {}, q.sandbox), ...asked(q), ` Asked at ${clock(q.asked_ms)}; denied unanswered in ${left}s.`),
    q.note ? h('p', { class: 'muted note' }, q.note) : null,
    h('div', { class: 'row' },
      h('button', { type: 'button', class: 'allow', onclick: () => answer(q, 'allow_always') }, 'Always (from the next start)'),
      h('button', { type: 'button', class: 'danger', onclick: () => answer(q, 'deny') }, 'Deny')));
}

function prompt(q) {
  const left = Math.max(0, Math.round((q.deadline_ms - Date.now()) / 1000));
  if (isProgram(q)) return programPrompt(q, left);
  return h('div', { class: 'prompt', role: 'alertdialog', 'aria-label': `Question from ${q.sandbox}`, dataset: { id: q.id } },
    h('p', {}, h('strong', {}, q.sandbox), ...asked(q), `, asked at ${clock(q.asked_ms)}; denied unanswered in ${left}s.`),
    h('div', { class: 'row' },
      h('button', { type: 'button', class: 'allow', onclick: () => answer(q, 'allow_once') }, 'Allow once'),
      h('button', { type: 'button', class: 'allow', onclick: () => answer(q, 'allow_always') }, 'Allow for this sandbox'),
      h('button', { type: 'button', class: 'allow', onclick: () => always(q) }, 'Always'),
      h('button', { type: 'button', class: 'danger', onclick: () => answer(q, 'deny') }, 'Deny')));
}

function draw() {
  const root = document.getElementById('prompts');
  const badge = document.getElementById('approval-count');
  badge.hidden = pending.length === 0;
  setText(badge, String(pending.length));
  // Keep the prompts already shown (and the focus in them).
  const ids = new Set(pending.map((q) => q.id));
  for (const el of [...root.children]) if (!ids.has(el.dataset.id)) el.remove();
  const shown = new Set([...root.children].map((el) => el.dataset.id));
  for (const q of pending) if (!shown.has(q.id)) root.append(prompt(q));
}

export function approvalsPage(root) {
  const list = h('div', {});
  root.append(h('h1', {}, 'Approvals'), h('p', { class: 'muted' }, 'Connections of sandboxes in ask mode wait here for an answer. "Allow for this sandbox" and "Always" put the name on the sandbox\'s allowlist at once; "Always" also shows the profile line that keeps it for new sandboxes.'), list);
  // The allowlist's profile lines are worded from the daemon's table.
  let row = null;
  const f = () => {
    list.replaceChildren(...(pending.length ? pending.map((q) => isProgram(q) ? h('div', { class: 'card question' }, h('p', {}, `${q.sandbox} may run `, h('code', {}, name(q))), q.note ? h('p', { class: 'muted' }, q.note) : null) : h('div', { class: 'card question' }, q.request ? h('p', {}, `${q.sandbox}: `, h('code', { class: 'held-request' }, shownName(q.request)), ` to ${what(q)}`) : h('p', {}, `${q.sandbox}: ${q.protocol} ${what(q)}`), q.request ? h('p', { class: 'muted' }, 'A request an ask rule holds: its name is allowed, this one request waits.') : row ? h('pre', {}, lines(profileLines(row, shownName(entryFor(q.name, q.port))))) : null)) : [h('p', { class: 'muted' }, 'No questions wait.')]));
  };
  listeners.add(f);
  f();
  fieldTable()
    .then((rows) => {
      row = liveRow(rows);
      f();
    })
    .catch(() => {});
  return () => listeners.delete(f);
}
