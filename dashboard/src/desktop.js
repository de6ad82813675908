// A desktop sandbox's screen: noVNC over the daemon's VNC WebSocket
// (RFB in binary frames). It opens view-only; a token with
// desktop:control may take over, and the daemon, not this page, decides
// what reaches the desktop: a view-only session's keys and pointer are
// dropped there.

import RFB from '@novnc/novnc';
import { api, enc, withCsrf } from './api.js';
import { h, setText } from './dom.js';

export function desktopView(root, id) {
  const status = h('p', { class: 'muted', role: 'status', id: 'desktop-status' }, 'connecting…');
  const takeOver = h('button', { type: 'button', id: 'desktop-control', hidden: true, onclick: toggle }, 'Take control');
  const screen = h('div', { class: 'desktop', id: 'desktop-screen', 'aria-label': 'The sandbox’s screen' });
  root.append(h('div', { class: 'row' }, status, takeOver), screen);
  let rfb = null;
  let control = false;
  let alive = true;

  // GET .../desktop says whether this is a desktop, whether its screen
  // answers yet (its programs start with the sandbox) and whether this
  // token may take over.
  async function start() {
    let s;
    try {
      s = await api('GET', `/v1/sandboxes/${enc(id)}/desktop`);
    } catch (err) {
      if (!alive) return;
      screen.hidden = true;
      setText(status, err.code === 'not_a_desktop'
        ? 'This sandbox is not a desktop: nothing serves a screen inside it. A sandbox made with the desktop profile has one.'
        : err.message);
      status.classList.add('error');
      return;
    }
    if (!alive) return;
    if (!s.screen) {
      setText(status, s.running
        ? 'The desktop is starting…'
        : 'The sandbox is stopped: start it to see its desktop.');
      setTimeout(() => alive && start(), s.running ? 1000 : 3000);
      return;
    }
    takeOver.hidden = !s.control;
    connect();
  }

  function connect() {
    if (rfb) rfb.disconnect();
    screen.replaceChildren();
    screen.removeAttribute('data-connected');
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const query = control ? '' : '?view_only=true';
    const url = withCsrf(`${scheme}://${location.host}/v1/sandboxes/${enc(id)}/desktop/vnc${query}`);
    const r = new RFB(screen, url, { shared: true, wsProtocols: ['binary'] });
    rfb = r;
    r.viewOnly = !control;
    r.scaleViewport = true;
    r.background = '#111418';
    r.addEventListener('connect', () => {
      screen.dataset.connected = 'true';
      setText(status, control ? 'Connected: you control this desktop.' : 'Connected: view only.');
    });
    r.addEventListener('disconnect', (e) => {
      if (rfb !== r) return;
      screen.removeAttribute('data-connected');
      setText(status, e.detail.clean ? 'Disconnected.' : 'The connection to the desktop ended.');
    });
  }

  function toggle() {
    control = !control;
    setText(takeOver, control ? 'Give back control' : 'Take control');
    connect();
  }

  start();
  return () => {
    alive = false;
    if (rfb) rfb.disconnect();
  };
}
