// The dashboard: a login, then pages chosen by the address's fragment
// (#/ the sandboxes, #/s/NAME one sandbox, #/s/NAME/desktop or
// #/sandboxes/NAME/desktop its screen, #/snapshots the caller's
// snapshots, #/approvals the questions).
// Everything it shows comes from the daemon's API; it holds no sandbox
// logic of its own.

import './style.css';
import { api, csrf, setCsrf, whenLoggedOut } from './api.js';
import { h, setText, toast } from './dom.js';
import { sandboxesPage } from './sandboxes.js';
import { sandboxPage } from './sandbox.js';
import { snapshotsPage } from './snapshots.js';
import { approvalsPage, startPrompts, stopPrompts } from './approvals.js';

const main = () => document.getElementById('main');
let leave = null;
let loggedIn = false;

function render() {
  if (leave) leave();
  leave = null;
  if (!loggedIn) return;
  const m = main();
  m.replaceChildren();
  const path = location.hash.replace(/^#/, '') || '/';
  // #/sandboxes/NAME[/TAB] (the README's form) names the same page as
  // #/s/NAME[/TAB].
  const one = path.match(/^\/(?:s|sandboxes)\/([^/]+)(?:\/(\w+))?$/);
  if (one) leave = sandboxPage(m, decodeURIComponent(one[1]), one[2] || 'events');
  else if (path === '/approvals') leave = approvalsPage(m);
  else if (path === '/snapshots') leave = snapshotsPage(m);
  else leave = sandboxesPage(m);
  for (const a of document.querySelectorAll('header nav a')) {
    a.toggleAttribute('aria-current', a.getAttribute('href') === `#${path}`);
  }
}

function loginPage(message) {
  loggedIn = false;
  stopPrompts();
  if (leave) leave();
  leave = null;
  document.getElementById('logout').hidden = true;
  const input = h('input', {
    id: 'token',
    name: 'token',
    type: 'password',
    autocomplete: 'current-password',
    required: true,
    placeholder: 'wdn_…',
    'aria-describedby': 'token-help',
  });
  const error = h('p', { class: 'error', role: 'alert' }, message || '');
  const form = h(
    'form',
    { class: 'login card', onsubmit: (e) => submit(e) },
    h('h1', {}, 'Log in to warden'),
    h('label', { for: 'token' }, 'Token'),
    input,
    h('p', { id: 'token-help', class: 'muted' }, 'A token made with ', h('code', {}, 'warden token create NAME'), '. It is kept in a cookie no script can read, for this browser session.'),
    h('button', { type: 'submit' }, 'Log in'),
    error,
  );
  async function submit(e) {
    e.preventDefault();
    try {
      const r = await api('POST', '/login', { token: input.value });
      input.value = '';
      enter(r);
    } catch (err) {
      setText(error, err.message);
      input.focus();
    }
  }
  main().replaceChildren(form);
  input.focus();
}

function enter(session) {
  setCsrf(session.csrf);
  loggedIn = true;
  document.getElementById('logout').hidden = false;
  startPrompts();
  render();
}

async function start() {
  whenLoggedOut(() => {
    setCsrf(null);
    if (loggedIn) loginPage('Your session ended: log in again.');
  });
  document.getElementById('logout').addEventListener('click', async () => {
    try {
      await api('POST', '/logout');
    } catch (e) {
      toast(e.message, true);
    }
    setCsrf(null);
    loginPage('Logged out.');
  });
  window.addEventListener('hashchange', render);
  // The CSRF token this origin kept from its login: without it there is
  // no session to ask about.
  if (!csrf()) return loginPage();
  try {
    enter(await api('GET', '/session'));
  } catch {
    setCsrf(null);
    loginPage();
  }
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
