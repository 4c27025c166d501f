// The status panel: what the server is doing, from GET /health (no key needed), read every two
// seconds while the panel is open: version, memory, loaded models with their slots and queues,
// and the last requests.

const mb = (n) => (n == null ? '?' : n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GB` : `${Math.round(n / 2 ** 20)} MB`);
const secs = (s) => (s >= 60 ? `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s` : `${Math.round(s)}s`);

function h(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function table(headers, rows) {
  const t = h('table');
  const head = t.createTHead().insertRow();
  for (const name of headers) head.append(h('th', name));
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const cell of row) tr.append(h('td', String(cell)));
  }
  return t;
}

function modelCard(m) {
  const card = h('section', undefined, 'loaded-model');
  card.dataset.model = m.name;
  const until = m.requests ? 'busy' : m.keep_alive_seconds == null ? 'never unloads'
    : `unloads in ${secs(Math.max(m.keep_alive_seconds - m.idle_seconds, 0))}`;
  const worker = m.worker ? `worker ${m.worker.pid} ${m.worker.state}${m.worker.crashes ? `, ${m.worker.crashes} crashes` : ''}` : 'in-process';
  card.append(h('h3', m.name),
    h('p', `${m.family} · ${mb(m.size_bytes)} · ${m.context_length} tokens of context`, 'muted'),
    h('p', `${m.busy_slots}/${m.slots} slots busy · ${m.queued} queued`, 'slots'),
    h('p', `${worker}${m.rss_bytes ? ` · ${mb(m.rss_bytes)} resident` : ''} · ${until}`, 'muted'));
  return card;
}

export function renderStatus(target, health) {
  const mem = health.memory || {};
  const parts = [
    h('p', `localchat ${health.version || ''}`.trim(), 'version'),
    h('p', `server ${mb(mem.server_rss_bytes)} resident · machine ${mb(mem.available_bytes)} free of ${mb(mem.total_bytes)}`, 'muted'),
    h('h3', 'Loaded models'),
  ];
  const loaded = health.loaded || [];
  parts.push(...(loaded.length ? loaded.map(modelCard) : [h('p', 'none: a model loads on its first request', 'muted')]));
  parts.push(h('h3', 'Last requests'));
  const recent = health.recent || [];
  parts.push(recent.length ? table(['when', 'model', 'tokens', 'tokens/s', 'end'], recent.map((r) => [
    new Date(r.started * 1000).toLocaleTimeString(), r.model,
    r.completion_tokens == null ? `${r.prompt_tokens} in` : `${r.prompt_tokens} in, ${r.completion_tokens} out`,
    r.completion_tokens && r.seconds ? (r.completion_tokens / r.seconds).toFixed(1) : '–', r.finish,
  ])) : h('p', 'none yet', 'muted'));
  target.replaceChildren(...parts);
}

// Poll /health into `target` until stop() is called.
export function watch(target, every = 2000) {
  let timer = null;
  let stopped = false;
  async function tick() {
    try {
      const r = await fetch('/health');
      if (!r.ok) throw new Error(`the server answered ${r.status}`);
      renderStatus(target, await r.json());
    } catch (e) {
      target.replaceChildren(h('p', `The server does not answer (${e.message}). Is localchat serve running?`, 'error-text'));
    }
    if (!stopped) timer = setTimeout(tick, every);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
