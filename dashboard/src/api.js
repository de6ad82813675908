// The daemon's HTTP API, through the session cookie: every change carries
// the session's CSRF token, every failure becomes an ApiError with the
// daemon's own problem message.

let csrf = null;
let onLoggedOut = () => {};

export function setCsrf(token) {
  csrf = token;
}

export function whenLoggedOut(f) {
  onLoggedOut = f;
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.message) || `HTTP ${status}`);
    this.status = status;
    this.code = problem && problem.code;
    this.details = problem && problem.details;
  }
}

export async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['x-warden-csrf'] = csrf;
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
