// MCP servers named in Settings (URLs, kept in this browser). The page reaches them through the
// server's bridge (POST /mcp/tools, /mcp/call): its CSP lets it talk to this server only, and MCP
// servers send no CORS headers. Their tools go with every request; a call the model makes runs
// once the user approves it (or has allowed that tool: kept in this browser, per server).

import { explain, getJSON } from './api.js';

const ALLOWED = 'localchat.mcp.allowed';
let listed = { key: null, servers: [] }; // the last listing, for the URLs it was made for

export const urls = (settings) => (settings.mcp || '').split('\n').map((s) => s.trim()).filter(Boolean);

// Each server's tools: [{ url, name, tools, skipped, error }]; listed again when the URLs change or `fresh`.
export async function servers(settings, fresh = false) {
  const list = urls(settings);
  const key = list.join('\n');
  if (!fresh && listed.key === key) return listed.servers;
  const found = await Promise.all(list.map(async (url) => {
    try {
      const r = await getJSON('/mcp/tools', { body: { url } });
      return { url, name: r.server, tools: r.tools, skipped: r.skipped };
    } catch (e) {
      return { url, name: url, tools: [], skipped: [], error: explain(e).message };
    }
  }));
  listed = { key, servers: found };
  return found;
}

// The tools to send, and which server runs each (a name two servers share: the first's).
export function toolbox(found) {
  const tools = [];
  const owner = new Map();
  for (const server of found) {
    for (const tool of server.tools) {
      if (owner.has(tool.function.name)) continue;
      owner.set(tool.function.name, server);
      tools.push(tool);
    }
  }
  return { tools, owner };
}

export const call = (url, name, args) => getJSON('/mcp/call', { body: { url, name, arguments: args || '{}' } });

function allowedSet() {
  try { return new Set(JSON.parse(localStorage.getItem(ALLOWED) || '[]')); } catch { return new Set(); }
}
export const isAllowed = (url, name) => allowedSet().has(`${url} ${name}`);
export function allow(url, name) {
  const all = allowedSet().add(`${url} ${name}`);
  localStorage.setItem(ALLOWED, JSON.stringify([...all]));
}

// One line per server, for the settings dialog.
export function describe(found) {
  return found.map((s) => {
    if (s.error) return { ok: false, text: `${s.url}: ${s.error}` };
    const names = s.tools.map((t) => t.function.name).join(', ') || 'no tools';
    const left = s.skipped.map((t) => `${t.name} left out: ${t.reason}`);
    return { ok: true, text: `${s.name}: ${names}${left.length ? ` (${left.join('; ')})` : ''}` };
  });
}
