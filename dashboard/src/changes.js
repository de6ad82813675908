// The workspace's changes as a review: each file with its kind, its
// flags explained, its diff, a commit of that file alone, and a discard
// of it (a commit
// applies only what this review showed; the daemon refuses a running
// sandbox's, whose changes are not final).

import { api, enc } from './api.js';
import { ask, h, newline, setText, shownName, toast } from './dom.js';

const KINDS = {
  added: 'added',
  modified: 'modified',
  deleted: 'deleted',
  mode: 'permissions changed',
  type_changed: 'type changed',
  renamed: 'renamed',
};

// The patch line by line, each shown escaped (`h`): a line's bidi
// overrides and isolates cannot make it read as other logic, and a
// carriage return before its end is shown (`\x0d`), never drawn as
// nothing. Only `\n` breaks a line, as the daemon's diff breaks them.
function diffLines(patch) {
  const all = patch.split('\n');
  if (all.length > 1 && all[all.length - 1] === '') all.pop();
  return h('pre', { class: 'diff' }, all.map((line) => {
    const tone = line.startsWith('+++') || line.startsWith('---') ? 'file' : line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : line.startsWith('@@') ? 'hunk' : '';
    return h('span', { class: tone }, line, newline());
  }));
}

export function changesView(root, id) {
  const list = h('div', { class: 'changes' });
  const note = h('p', { class: 'muted' });
  // Said when the last run's changes were lost (its supervisor ended
  // before saving its layer): the list is only what was saved before it.
  const lost = h('p', { class: 'lost', role: 'alert', hidden: true });
  const reload = h('button', { type: 'button', onclick: load }, 'Refresh');
  root.append(h('div', { class: 'row' }, reload, note), lost, list);

  async function commit(c) {
    const flagged = c.flags.length > 0;
    if (flagged && !ask`${c.path} is flagged:\n${c.flags.map((f) => `${f.rule}: ${f.reason}`)}\n\nCommit it anyway?`) return;
    try {
      const r = await api('POST', `/v1/sandboxes/${enc(id)}/commit`, { paths: [c.path], accept_flagged: flagged });
      toast(`Committed ${r.applied.join(', ') || 'nothing'}`);
      load();
    } catch (err) {
      toast(err.message, true);
    }
  }

  async function discard(c) {
    if (!ask`Throw away the sandbox's change to ${c.path}? The real workspace's version shows through again.`) return;
    try {
      const r = await api('POST', `/v1/sandboxes/${enc(id)}/discard`, { paths: [c.path] });
      toast(`Discarded ${r.discarded.join(', ') || 'nothing'}`);
      load();
    } catch (err) {
      toast(err.message, true);
    }
  }

  function card(c) {
    const content = c.content;
    const size = content && content.type === 'text' ? `+${content.added} −${content.removed}${content.coarse ? ' (coarse diff: cut at its deadline)' : ''}`
      : content && content.type === 'binary' ? `binary ${content.old_size} → ${content.new_size} bytes`
      : content && content.type === 'not_diffed' ? `text ${content.old_lines} → ${content.new_lines} lines, not diffed: ${content.reason === 'too_many_lines' ? 'too many lines' : "the review's time was spent on other files"}`
      : '';
    return h('article', { class: `card change${c.flags.length ? ' flagged' : ''}`, dataset: { path: c.path } },
      h('header', { class: 'row' },
        h('h3', {}, h('code', {}, shownName(c.path))),
        h('span', { class: `tag ${c.kind === 'deleted' ? 'deny' : 'info'}` }, KINDS[c.kind] || c.kind),
        c.from ? h('span', { class: 'muted' }, `from ${shownName(c.from)}`) : null,
        h('span', { class: 'muted' }, size),
        h('button', { type: 'button', class: 'commit', onclick: () => commit(c), 'aria-label': `Commit ${shownName(c.path)}` }, 'Commit this file'),
        h('button', { type: 'button', class: 'danger discard', onclick: () => discard(c), 'aria-label': `Discard ${shownName(c.path)}` }, 'Discard')),
      c.flags.length
        ? h('ul', { class: 'flags' }, c.flags.map((f) => h('li', {}, h('strong', {}, f.rule), ': ', f.reason)))
        : null,
      content && content.patch ? h('details', { open: true }, h('summary', {}, 'Diff'), diffLines(content.patch)) : null);
  }

  async function load() {
    setText(note, 'loading…');
    try {
      const r = await api('GET', `/v1/sandboxes/${enc(id)}/changes?content=true`);
      setText(lost, r.lost ? `Changes lost: ${r.lost}` : '');
      lost.hidden = !r.lost;
      list.replaceChildren(...r.changes.map(card));
      setText(note, `${r.changes.length} change(s), ${r.flagged} flagged. A flag says why a change deserves a second look (a git hook, a file the host runs, a link out of the workspace); committing a flagged file asks first. Commit and discard need the sandbox stopped.`);
      if (!r.changes.length) list.replaceChildren(h('p', { class: 'muted' }, 'No changes.'));
    } catch (err) {
      setText(note, err.message);
      list.replaceChildren();
    }
  }
  root.addEventListener('shown', load);
  load();
  return () => {};
}
