// Settings kept in this browser: system prompt, sampling, JSON output, extra request fields, MCP
// servers, the API key, the theme. The sampling fields and their bounds come from the server (/ui/knobs.json:
// the engine's own declaration), so the form never offers what the server would refuse.

import { apiKey, getJSON } from './api.js';
import * as mcp from './mcp.js';

const KEY = 'localchat.settings';
const THEME = 'localchat.theme';
const SHOWN = ['temperature', 'top_p', 'top_k', 'min_p', 'repeat_penalty', 'max_tokens', 'seed'];
const INTEGER = new Set(['top_k', 'max_tokens', 'seed', 'penalty_last_n', 'repetition_stop']);

export function load() {
  try {
    return { system: '', sampling: {}, json: false, schema: '', extra: '', mcp: '', ...JSON.parse(localStorage.getItem(KEY) || '{}') };
  } catch {
    return { system: '', sampling: {}, json: false, schema: '', extra: '', mcp: '' };
  }
}

const store = (settings) => localStorage.setItem(KEY, JSON.stringify(settings));

// The request fields these settings add to a chat request (besides the messages).
export function requestFields(s) {
  const body = { ...s.sampling };
  if (s.json) {
    body.response_format = s.schema.trim()
      ? { type: 'json_schema', json_schema: { name: 'answer', schema: JSON.parse(s.schema) } }
      : { type: 'json_object' };
  }
  return { ...body, ...(s.extra.trim() ? JSON.parse(s.extra) : {}) };
}

let knobs = null;
async function knobInputs(grid) {
  knobs ??= await getJSON('/ui/knobs.json').catch(() => ({}));
  if (grid.childElementCount) return;
  for (const name of SHOWN) {
    const bounds = knobs[name] || {};
    const input = document.createElement('input');
    Object.assign(input, { type: 'number', name, placeholder: 'default', step: INTEGER.has(name) ? '1' : 'any' });
    const low = bounds.ge ?? bounds.gt;
    if (low !== undefined) input.min = String(low);
    if (bounds.le !== undefined) input.max = String(bounds.le);
    const label = document.createElement('label');
    label.append(name.replace('_', ' '), input);
    grid.append(label);
  }
}

function parseForm(form) {
  const data = new FormData(form);
  const sampling = {};
  for (const name of SHOWN) {
    const raw = String(data.get(name) ?? '').trim();
    if (raw === '') continue;
    const input = form.elements[name];
    if (!input.checkValidity()) throw new Error(`${name}: ${input.validationMessage}`);
    sampling[name] = INTEGER.has(name) ? parseInt(raw, 10) : parseFloat(raw);
  }
  const settings = { system: String(data.get('system')).trim(), sampling, json: data.get('json') === 'on',
    schema: String(data.get('schema')), extra: String(data.get('extra')), mcp: String(data.get('mcp')).trim() };
  for (const url of mcp.urls(settings)) {
    if (!/^https?:\/\/\S+$/.test(url)) throw new Error(`MCP servers: ${url} is not an http(s) URL`);
  }
  for (const [field, text] of [['JSON schema', settings.schema], ['Extra request fields', settings.extra]]) {
    if (!text.trim()) continue;
    let value;
    try { value = JSON.parse(text); } catch (e) { throw new Error(`${field}: not JSON (${e.message})`); }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${field}: give a JSON object`);
  }
  return settings;
}

// Open the dialog; resolves with the saved settings, or null when cancelled.
export async function edit(dialog, current) {
  const form = dialog.querySelector('form');
  const error = dialog.querySelector('#settings-error');
  await knobInputs(form.querySelector('#knobs'));
  form.elements.system.value = current.system;
  for (const name of SHOWN) form.elements[name].value = current.sampling[name] ?? '';
  form.elements.json.checked = current.json;
  form.elements.schema.value = current.schema;
  form.elements.extra.value = current.extra;
  form.elements.mcp.value = current.mcp || '';
  form.elements.key.value = apiKey.get();
  error.textContent = '';
  const check = async (fresh) => {
    const list = dialog.querySelector('#mcp-status');
    const wanted = { mcp: form.elements.mcp.value };
    list.replaceChildren(...mcp.urls(wanted).map((url) => Object.assign(document.createElement('li'), { textContent: `${url}: connecting…` })));
    const lines = mcp.describe(await mcp.servers(wanted, fresh));
    list.replaceChildren(...lines.map(({ ok, text }) => Object.assign(document.createElement('li'),
      { textContent: text, className: ok ? 'ok' : 'error-text' })));
  };
  dialog.querySelector('#mcp-check').onclick = () => check(true);
  check(false);
  dialog.showModal();
  return new Promise((resolve) => {
    const finish = (value) => {
      form.onsubmit = null;
      dialog.querySelector('#settings-cancel').onclick = null;
      dialog.close();
      resolve(value);
    };
    dialog.querySelector('#settings-cancel').onclick = () => finish(null);
    dialog.oncancel = () => resolve(null);
    form.onsubmit = (event) => {
      event.preventDefault();
      try {
        const settings = parseForm(form);
        apiKey.set(form.elements.key.value.trim());
        store(settings);
        finish(settings);
      } catch (e) {
        error.textContent = e.message;
      }
    };
  });
}

// Theme: '' follows the system; 'light' or 'dark' is the user's choice.
export function applyTheme(theme = localStorage.getItem(THEME) || '') {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

export function toggleTheme() {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === 'dark'
    : matchMedia('(prefers-color-scheme: dark)').matches;
  const next = dark ? 'light' : 'dark';
  localStorage.setItem(THEME, next);
  applyTheme(next);
  return next;
}
