// A few helpers to build the page without innerHTML: text from the
// sandbox is always set as text, never parsed as markup, and every text
// reaches the page or a dialog through this file alone, shown as every
// door shows it (`shownLine`): a child string of `h`, `setText`, `lines`,
// `ask` and `toast` have their invisible characters escaped, so no view
// can put a right-to-left override, a newline or an escape sequence of
// the sandbox's on screen raw. `build.sh --check` refuses a view that
// sets text or opens a dialog any other way.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  add(el, children);
  return el;
}

function add(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) add(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(shownLine(c)));
  }
}

// An element's whole text, as a child string of `h` is shown.
export function setText(el, text) {
  el.textContent = shownLine(text);
}

// A text of several lines (a file's, a profile's): each line shown as
// `shownLine` shows it, the line breaks kept (a carriage return before
// one is shown, `\x0d`: `hello` and `hello\r` never read the same).
export function lines(text) {
  const out = document.createDocumentFragment();
  String(text ?? '').split('\n').forEach((line, i) => {
    if (i) out.append(newline());
    out.append(shownLine(line));
  });
  return out;
}

// A line break of the page's own (between the lines of a diff).
export function newline() {
  return document.createTextNode('\n');
}

// `confirm()` with a question of the page's own, every value put into it
// shown as a name (`shownName`): a path holding newlines cannot write
// lines of its own into the dialog (`notes.txt is not flagged.\n\nCommit
// it anyway?`), nor an override reorder it. Used as a tag:
// ask`Delete ${name}?`. A list of values is shown one to a line.
export function ask(parts, ...values) {
  const shown = (v) => (Array.isArray(v) ? v.map(shownName).join('\n') : shownName(v));
  return window.confirm(parts.reduce((out, part, i) => out + shown(values[i - 1]) + part));
}

export function svg(tag, attrs) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

export function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function age(seconds) {
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
  return `${Math.floor(seconds / 86400)}d`;
}

export function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

let toastTimer = null;
export function toast(text, bad) {
  const t = document.getElementById('toast');
  setText(t, text);
  t.className = bad ? 'show bad' : 'show';
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.className = ''), bad ? 8000 : 3000);
}

// Characters drawn as nothing (or not as themselves) that still change
// what a line reads as: control characters, and Unicode's format
// characters with the other invisible ones (bidi overrides, embeddings
// and isolates, zero-width characters, the byte-order mark, soft hyphens,
// tags, variation selectors). The set is warden_workspace::is_format's,
// so every door shows a name the same way. A text node keeps markup out;
// this keeps a right-to-left override from making `x\u202Eexe.txt` read
// as another name.
const INVISIBLE = '\\u0000-\\u0008\\u000a-\\u001f\\u007f-\\u009f\\u00ad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2'
  + '\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufffb'
  + '\\u{110bd}\\u{110cd}\\u{13430}-\\u{1343f}\\u{1bca0}-\\u{1bca3}\\u{1d173}-\\u{1d17a}\\u{e0000}-\\u{e0fff}';
const IN_LINE = new RegExp(`[${INVISIBLE}]`, 'gu');
const IN_NAME = new RegExp(`[${INVISIBLE}\\t\\\\]`, 'gu');

function escaped(c) {
  if (c === '\\') return '\\\\';
  const n = c.codePointAt(0);
  return n < 0x100 ? `\\x${n.toString(16).padStart(2, '0')}` : `\\u{${n.toString(16).padStart(4, '0')}}`;
}

// A name or path a sandbox chose (a host it asks for, a program, a held
// request's line), as every door shows it: invisible characters and tabs
// written as escapes, `\` as `\\` (a name cannot spell an escape it does
// not hold).
export function shownName(text) {
  return String(text ?? '').replace(IN_NAME, escaped);
}

// A whole line holding such names: its invisible characters escaped,
// tabs and backslashes kept.
export function shownLine(text) {
  return String(text ?? '').replace(IN_LINE, escaped);
}
