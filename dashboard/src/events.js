// A sandbox's live events (server-sent events from the daemon, replayed
// from the start of its log), each shown as one line with its kind's
// colour (a denial with what would have allowed it), and a filter.

import { withCsrf } from './api.js';
import { h, bytes, clock, setText, shownLine, shownName } from './dom.js';
import { fieldTable, proposeRule, proposalFor, profileWords } from './rules.js';

// A long command line, cut (the whole one is in the log).
function short(text) {
  const line = text.replace(/\s+/g, ' ');
  return line.length > 140 ? `${line.slice(0, 140)}…` : line;
}

// How each event kind reads: its group for the filter, a short label,
// a tone (allow, deny, warn, info), and its text; a denial's proposal is
// worded from the daemon's field table (`rows`).
function describe(e, rows) {
  switch (e.event) {
    case 'connection': {
      const where = `${shownName(e.name || e.original_destination || '?')}:${e.port}`;
      const rule = e.rule ? ` by ${e.rule}` : '';
      // A request's detail is what was decided (its method and path, the
      // query's values redacted, and the rule): the name alone says little.
      if (e.protocol === 'request' && e.allowed) {
        return { group: 'network', label: 'allow', tone: 'allow', text: `${e.protocol} ${where}: ${e.detail}${e.bytes_out || e.bytes_in ? ` (${bytes(e.bytes_out)} out, ${bytes(e.bytes_in)} in)` : ''}` };
      }
      return e.allowed
        ? { group: 'network', label: 'allow', tone: 'allow', text: `${e.protocol} ${where}${rule}${e.bytes_out || e.bytes_in ? ` (${bytes(e.bytes_out)} out, ${bytes(e.bytes_in)} in)` : ''}` }
        : { group: 'network', label: 'deny', tone: 'deny', text: `${e.protocol} ${where}: ${e.detail}${rule}`, remedy: e.remedy, propose: proposalFor(e, rows) };
    }
    case 'connection_closed':
      return { group: 'network', label: 'closed', tone: 'info', text: `${shownName(e.name || '?')}:${e.port} after ${e.duration_ms} ms (${bytes(e.bytes_out)} out, ${bytes(e.bytes_in)} in)` };
    case 'connections_aggregated':
      return { group: 'network', label: e.allowed ? 'allow ×' : 'deny ×', tone: e.allowed ? 'allow' : 'deny', text: `${e.count} more ${e.protocol} to ${e.name ? shownName(e.name) : 'other names'}: ${e.detail}` };
    case 'ask':
      return { group: 'network', label: 'ask', tone: 'warn', text: `${e.protocol} ${shownName(e.name)}:${e.port} waits for an answer (question ${e.question})` };
    case 'ask_answered':
      return { group: 'network', label: e.decision === 'deny' || e.decision === 'timeout' ? 'deny' : 'allow', tone: e.decision === 'deny' || e.decision === 'timeout' ? 'deny' : 'allow', text: `${shownName(e.name)}:${e.port}: ${e.decision} by ${e.by}` };
    case 'egress_changed':
      return { group: 'network', label: 'egress', tone: 'info', text: `allowlist changed by ${e.by}: ${e.added.length ? `+${e.added.join(', +')}` : ''} ${e.removed.length ? `-${e.removed.join(', -')}` : ''}${e.closed ? ` (${e.closed} connection(s) cut)` : ''}` };
    case 'secret':
      return { group: 'secrets', label: e.action === 'blocked' ? 'blocked' : 'secret', tone: e.action === 'blocked' ? 'deny' : 'allow', text: `${e.name} ${e.action} for ${shownName(e.host)}${e.detail ? `: ${e.detail}` : ''}` };
    case 'secrets_aggregated':
      return { group: 'secrets', label: 'secret ×', tone: e.action === 'blocked' ? 'deny' : 'allow', text: `${e.count} more: ${e.name} ${e.action} for ${shownName(e.host)}` };
    case 'exec_started':
      return { group: 'processes', label: 'exec', tone: 'info', text: `#${e.exec} ${short(e.argv.join(' '))}${e.tty ? ' (terminal)' : ''}` };
    case 'exec_exited':
      return { group: 'processes', label: 'exit', tone: e.status === 0 ? 'info' : 'warn', text: `#${e.exec} exited ${e.signal ? `on signal ${e.signal}` : `with ${e.status}`} after ${e.duration_ms} ms` };
    case 'created':
      return { group: 'processes', label: 'created', tone: 'info', text: `sandbox configured: ${e.command.join(' ')}${e.workspace ? ` over ${e.workspace}` : ''}${e.rootless ? ' (rootless)' : ''}` };
    // A program the exec allowlist refused inside, as a refused name is
    // shown: a denial, with what would have allowed it (the option's JSON
    // path and the entry, in the API's words).
    case 'exec_refused':
      return { group: 'processes', label: 'deny', tone: 'deny', text: `exec ${e.program ? shownName(e.program) : 'of an unnamed file'}: refused by ${e.rule} (${e.by})`, remedy: e.program ? `allowed by /process/allow_exec: ${shownName(e.program)}` : null };
    case 'exec_refused_aggregated':
      return { group: 'processes', label: 'deny ×', tone: 'deny', text: `${e.count} more exec refusals of ${e.program ? shownName(e.program) : 'other programs'} by ${e.rule}` };
    case 'api_denied':
      return { group: 'violations', label: 'refused', tone: 'deny', text: `${e.method} ${e.route}: ${e.reason}` };
    case 'ttl_changed':
      return { group: 'other', label: 'ttl', tone: 'info', text: e.deadline_ms ? `stops at ${new Date(e.deadline_ms).toLocaleString()}` : 'no TTL' };
    // The init's host PID is the owner's to see: the daemon leaves it out
    // of what a token holder is sent (a host fact, not the sandbox's).
    case 'started':
      return { group: 'processes', label: 'start', tone: 'info', text: Number.isInteger(e.pid) ? `sandbox started (init pid ${e.pid})` : 'sandbox started' };
    case 'exited':
      return { group: 'processes', label: 'end', tone: e.status === 0 ? 'info' : 'warn', text: `sandbox ended: ${e.reason}, status ${e.status}` };
    // A pause (by a person, or by a snapshot or fork for the moment of
    // its copy) and the resume after it.
    case 'paused':
      return { group: 'processes', label: 'paused', tone: 'warn', text: `paused by ${e.by}: its processes are frozen in place (${e.freezer})` };
    case 'resumed':
      return { group: 'processes', label: 'resumed', tone: 'info', text: `resumed by ${e.by} after ${e.paused_ms} ms paused` };
    case 'stopping':
      return { group: 'processes', label: 'stop', tone: 'info', text: `stopping: ${e.reason}` };
    case 'degraded':
      return { group: 'violations', label: 'degraded', tone: 'warn', text: `${e.layer}: ${e.lost}` };
    case 'workspace':
      return { group: 'workspace', label: e.action, tone: e.action === 'commit-refused' ? 'deny' : 'info', text: `${e.paths.map(shownName).join(', ') || shownName(e.name)}${e.detail ? `: ${e.detail}` : ''}` };
    case 'events_dropped':
      return { group: 'violations', label: 'dropped', tone: 'warn', text: `${e.count} events lost` };
    case 'cache_left_out':
      return { group: 'workspace', label: 'cache full', tone: 'warn', text: `${e.files} ${e.files === 1 ? 'file' : 'files'} not kept in the profile's caches (bound ${Math.floor(e.limit_bytes / 1048576)} MiB)` };
    // What a VM sandbox's relay cut to keep its bounds: an exec's output
    // whose caller took nothing, or the whole guest.
    case 'exec_output_cut':
      return { group: 'processes', label: 'output cut', tone: 'warn', text: `#${e.exec}: its caller took nothing of its output for ${e.stalled_ms / 1000} s; what it writes from now on is dropped (the process runs on)` };
    case 'vm_cut_off':
      return { group: 'violations', label: 'vm cut off', tone: 'deny', text: e.cause === 'unasked_answers' ? `the guest sent ${e.answers} answers about its shares that nobody asked for (the host holds at most ${e.bound}); the sandbox ends` : e.cause === 'guest_stalled' ? `the guest took nothing from its channel for ${e.stalled_ms / 1000} s; the sandbox ends` : `${e.cause}; the sandbox ends` };
    default:
      return { group: 'other', label: e.event, tone: 'info', text: '' };
  }
}

export const GROUPS = ['network', 'secrets', 'violations', 'processes', 'workspace', 'other'];

export function eventsView(root, id) {
  const list = h('ol', { class: 'events', 'aria-live': 'polite', 'aria-relevant': 'additions' });
  const text = h('input', { type: 'search', placeholder: 'Filter: a name, a rule, a command…', 'aria-label': 'Filter events' });
  const onlyDenied = h('input', { type: 'checkbox', id: 'only-denied' });
  const shown = new Set(GROUPS);
  const boxes = GROUPS.map((g) => {
    const box = h('input', { type: 'checkbox', checked: true, onchange: () => { box.checked ? shown.add(g) : shown.delete(g); apply(); } });
    return h('label', { class: 'check' }, box, g);
  });
  const status = h('span', { class: 'muted' }, 'connecting…');
  const proposal = h('div', {});
  root.append(
    h('div', { class: 'filters' }, text, h('label', { class: 'check' }, onlyDenied, 'denied only'), ...boxes, status),
    proposal,
    list,
  );
  text.addEventListener('input', apply);
  onlyDenied.addEventListener('change', apply);

  function visible(li) {
    const q = text.value.trim().toLowerCase();
    return shown.has(li.dataset.group) && (!onlyDenied.checked || li.dataset.tone === 'deny') && (!q || li.textContent.toLowerCase().includes(q));
  }
  function apply() {
    for (const li of list.children) li.hidden = !visible(li);
  }

  let rows = [];
  function add(e) {
    const d = describe(e, rows);
    const li = h('li', { class: `ev ${d.tone}`, dataset: { group: d.group, tone: d.tone, event: e.event } },
      h('time', { datetime: new Date(e.ts_ms).toISOString() }, clock(e.ts_ms)),
      h('span', { class: `tag ${d.tone}` }, d.label),
      h('span', { class: 'text' }, shownLine(d.text || JSON.stringify(e))),
      // What would have allowed it, in the API's words (the option's JSON
      // path and the entry), as the daemon tells every reader of events.
      d.remedy ? h('span', { class: 'remedy' }, shownLine(d.remedy)) : null,
      // A rule is proposed (to edit and apply now) only for an option a
      // running sandbox takes; any other is said as the profile's words.
      d.propose && d.propose.row.live ? h('button', { type: 'button', class: 'small', onclick: () => proposeRule(proposal, id, d.propose) }, 'Propose a rule') : null,
      d.propose && !d.propose.row.live ? profileWords(d.propose) : null);
    li.hidden = !visible(li);
    const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
    list.append(li);
    while (list.children.length > 2000) list.firstElementChild.remove();
    if (atBottom) list.scrollTop = list.scrollHeight;
  }

  // The field table first (what a denial's proposal is worded from);
  // without it the events still show, with no proposal.
  let source = null;
  let closed = false;
  fieldTable()
    .catch(() => [])
    .then((table) => {
      rows = table;
      if (!closed) open();
    });
  function open() {
    source = new EventSource(withCsrf(`/v1/sandboxes/${encodeURIComponent(id)}/events`));
    source.onopen = () => setText(status, 'live');
    // The stream ends when the sandbox stops; the browser then asks again
    // from the last event it has (Last-Event-ID), so nothing is shown twice.
    source.onerror = () => setText(status, source.readyState === EventSource.CLOSED ? 'closed' : 'not running: waiting');
    source.onmessage = (m) => {
      try {
        add(JSON.parse(m.data));
      } catch {
        /* a line that is not an event is skipped */
      }
    };
  }
  return () => {
    closed = true;
    if (source) source.close();
  };
}
