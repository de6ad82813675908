// Resource graphs over time, drawn as SVG lines from the samples the
// sandbox's page takes every two seconds.

import { h, svg, bytes } from './dom.js';

const W = 600;
const H = 120;

function chart(title, points, format) {
  const max = Math.max(1, ...points.map((p) => p.v));
  const t0 = points.length ? points[0].t : 0;
  const t1 = points.length ? points[points.length - 1].t : 1;
  const span = Math.max(1, t1 - t0);
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}: now ${points.length ? format(points[points.length - 1].v) : 'unknown'}, at most ${format(max)}`, class: 'chart' });
  s.append(svg('line', { x1: 0, y1: H - 1, x2: W, y2: H - 1, class: 'axis' }));
  if (points.length > 1) {
    const d = points.map((p, i) => `${i ? 'L' : 'M'}${(((p.t - t0) / span) * W).toFixed(1)},${(H - 4 - (p.v / max) * (H - 12)).toFixed(1)}`).join(' ');
    s.append(svg('path', { d, class: 'line' }));
  }
  const last = points.length ? format(points[points.length - 1].v) : '–';
  return h('figure', { class: 'card' }, h('figcaption', {}, h('strong', {}, title), ` ${last} (max ${format(max)})`), s);
}

export function resourcesView(root, samples) {
  function draw() {
    if (root.hidden) return;
    const mem = samples.filter((s) => s.memory !== null && s.memory !== undefined).map((s) => ({ t: s.t, v: s.memory }));
    const rate = [];
    const cpu = [];
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1];
      const b = samples[i];
      const dt = Math.max(1, b.t - a.t) / 1000;
      rate.push({ t: b.t, v: Math.max(0, (b.egress - a.egress) / dt) });
      if (a.cpu !== undefined && b.cpu !== undefined && a.cpu !== null && b.cpu !== null) cpu.push({ t: b.t, v: Math.max(0, (b.cpu - a.cpu) / 1e4 / dt) });
    }
    const procs = samples.map((s) => ({ t: s.t, v: s.processes }));
    root.replaceChildren(
      h('div', { class: 'charts' },
        chart('CPU', cpu, (v) => `${v.toFixed(0)}%`),
        chart('Memory', mem, bytes),
        chart('Egress', rate, (v) => `${bytes(Math.round(v))}/s`),
        chart('Processes', procs, (v) => String(v))),
    );
  }
  root.addEventListener('sample', draw);
  root.addEventListener('shown', draw);
  draw();
  return () => {};
}
