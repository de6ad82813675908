// A terminal into the sandbox: xterm.js over the daemon's PTY WebSocket
// (binary frames carry the terminal's bytes both ways, text frames the
// JSON control messages).

import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';
import { withCsrf } from './api.js';
import { h, ask, setText } from './dom.js';

// A link the sandbox's output carries (OSC 8): opened only when it is
// http(s), after the owner says so with the address shown escaped, in a
// new page that keeps no handle on this one. Any other scheme
// (`javascript:`, `data:`, `file:`, a custom handler) is never opened,
// whatever xterm.js itself would allow.
export function openLink(event, uri) {
  let url;
  try {
    url = new URL(uri);
  } catch {
    return;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return;
  if (!ask`Open ${url.href} from the sandbox's terminal in a new page?`) return;
  window.open(url.href, '_blank', 'noopener,noreferrer');
}

export function terminalView(root, id) {
  const box = h('div', { class: 'terminal', id: 'terminal' });
  const status = h('p', { class: 'muted', role: 'status' }, 'connecting…');
  const again = h('button', { type: 'button', hidden: true, onclick: connect }, 'New session');
  root.append(h('p', { class: 'muted' }, 'A shell in the sandbox. Press Escape then Tab to leave the terminal with the keyboard.'), box, h('div', { class: 'row' }, status, again));
  const term = new Terminal({ cursorBlink: true, convertEol: false, fontSize: 14, scrollback: 5000, screenReaderMode: false, theme: { background: '#111418' }, linkHandler: { activate: openLink, allowNonHttpProtocols: false } });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  let ws = null;
  let escape = false;
  term.attachCustomKeyEventHandler((e) => {
    // Escape then Tab lets the focus leave the terminal.
    if (e.type !== 'keydown') return true;
    if (e.key === 'Escape') {
      escape = true;
      return true;
    }
    if (escape && e.key === 'Tab') {
      escape = false;
      return false;
    }
    escape = false;
    return true;
  });
  const encoder = new TextEncoder();
  term.onData((d) => ws && ws.readyState === WebSocket.OPEN && ws.send(encoder.encode(d)));
  term.onResize(({ rows, cols }) => ws && ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ type: 'resize', rows, cols })));

  function connect() {
    again.hidden = true;
    try {
      fit.fit();
    } catch {
      /* not laid out yet */
    }
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    ws = new WebSocket(withCsrf(`${scheme}://${location.host}/v1/sandboxes/${encodeURIComponent(id)}/pty`));
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => {
      setText(status, 'connected');
      ws.send(JSON.stringify({ type: 'start', rows: term.rows, cols: term.cols }));
      term.focus();
    };
    ws.onmessage = (m) => {
      if (typeof m.data !== 'string') {
        term.write(new Uint8Array(m.data));
        return;
      }
      const msg = JSON.parse(m.data);
      if (msg.type === 'started') setText(status, `running (pid ${msg.pid})`);
      if (msg.type === 'exit') setText(status, `exited ${msg.signal ? `on signal ${msg.signal}` : `with ${msg.exit_status}`}`);
      if (msg.type === 'error') setText(status, msg.message);
    };
    ws.onclose = () => {
      again.hidden = false;
      if (status.textContent === 'connected' || status.textContent.startsWith('running')) setText(status, 'closed');
    };
  }
  const resize = () => {
    if (root.hidden) return;
    try {
      fit.fit();
    } catch {
      /* not laid out */
    }
  };
  window.addEventListener('resize', resize);
  root.addEventListener('shown', resize);
  connect();
  return () => {
    window.removeEventListener('resize', resize);
    if (ws) ws.close();
    term.dispose();
  };
}
