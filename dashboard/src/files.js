// The sandbox's files: a directory listing to walk, and a file's text.

import { api, csrfHeaders, enc } from './api.js';
import { h, bytes, lines, shownName } from './dom.js';

export function filesView(root, id) {
  const where = h('p', { class: 'crumbs' });
  const list = h('ul', { class: 'files' });
  const view = h('div', {});
  root.append(where, list, view);

  async function show(path) {
    where.replaceChildren(h('code', {}, `/workspace/${shownName(path)}`));
    view.replaceChildren();
    try {
      const r = await api('GET', `/v1/sandboxes/${enc(id)}/files/list${path ? `?path=${enc(path)}` : ''}`);
      const up = path ? path.split('/').slice(0, -1).join('/') : null;
      // The DOM writes a null child as the text "null": leave it out.
      list.replaceChildren(
        ...(up !== null ? [h('li', {}, h('button', { type: 'button', class: 'link', onclick: () => show(up) }, '..'))] : []),
        ...r.entries.map((e) => h('li', {},
          h('button', { type: 'button', class: 'link', onclick: () => (e.kind === 'dir' ? show(e.path) : open(e.path)) }, e.kind === 'dir' ? `${shownName(e.name)}/` : shownName(e.name)),
          h('span', { class: 'muted' }, ` ${e.kind === 'dir' ? '' : bytes(e.size)}`))),
      );
    } catch (err) {
      list.replaceChildren(h('li', { class: 'error' }, err.message));
    }
  }

  async function open(path) {
    try {
      const r = await fetch(`/v1/sandboxes/${enc(id)}/files?path=${enc(path)}`, { credentials: 'same-origin', headers: csrfHeaders() });
      if (!r.ok) throw new Error((await r.json()).message);
      const buf = new Uint8Array(await r.arrayBuffer());
      const text = new TextDecoder('utf-8', { fatal: false }).decode(buf.slice(0, 256 * 1024));
      view.replaceChildren(h('h3', {}, h('code', {}, shownName(path))), h('pre', { class: 'file' }, lines(text)), ...(buf.length > 256 * 1024 ? [h('p', { class: 'muted' }, `first 256 KiB of ${bytes(buf.length)}`)] : []));
    } catch (err) {
      view.replaceChildren(h('p', { class: 'error' }, err.message));
    }
  }
  show('');
  return () => {};
}
