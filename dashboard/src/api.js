// The daemon's HTTP API, through the session cookie: every request
// carries the session's CSRF token too, every failure becomes an ApiError
// with the daemon's own problem message.
//
// The browser sends the cookie to every port of this host (a sandbox's
// published dev server included), so the cookie alone opens nothing: the
// CSRF token, given only at login, is kept in this origin's own storage,
// which no other origin (no other port) reads, and shared by this
// origin's tabs.

const KEY = 'warden.csrf';
let onLoggedOut = () => {};

export function csrf() {
  try {
    return localStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function setCsrf(token) {
  try {
    if (token) localStorage.setItem(KEY, token);
    else localStorage.removeItem(KEY);
  } catch {
    /* storage refused: the session lasts as long as the page */
  }
}

// A URL for what cannot send headers (EventSource, WebSocket): the CSRF
// token in the query, which the daemon takes out before the route sees it.
export function withCsrf(url) {
  const t = csrf();
  if (!t) return url;
  return `${url}${url.includes('?') ? '&' : '?'}csrf=${encodeURIComponent(t)}`;
}

export function csrfHeaders() {
  const t = csrf();
  return t ? { 'x-warden-csrf': t } : {};
}

export function whenLoggedOut(f) {
  onLoggedOut = f;
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.message) || `HTTP ${status}`);
    this.status = status;
    this.code = problem && problem.code;
    // The JSON pointer of the request's member at fault (`/name`), when
    // one is: the page marks that input.
    this.field = problem && problem.field;
    this.details = problem && problem.details;
  }
}

export async function api(method, path, body) {
  const headers = { accept: 'application/json', ...csrfHeaders() };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (r.status === 401 && path !== '/login') onLoggedOut();
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

export const enc = encodeURIComponent;
