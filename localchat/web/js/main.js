// The chat page: wires the conversation list, the model picker, the composer and the answers
// streamed from /v1/chat/completions. No framework: state lives here, the DOM is rebuilt from it.

import * as api from './api.js';
import * as mcp from './mcp.js';
import * as store from './store.js';
import { editInPlace, messageView } from './messages.js';
import * as settings from './settings.js';
import { renderList } from './sidebar.js';
import { watch } from './status.js';
import { attachFiles, pastedAttachment, renderAttachments } from './attachments.js';
import { applyChunk, everyFrame, requestBody, timing } from './answer.js';
import { askKey } from './key.js';
import { copy, download, toast } from './ui.js';

const $ = (id) => document.getElementById(id);
const empty = $('empty');
const state = { all: [], conv: null, models: [], model: '', busy: null, settings: settings.load(), attachments: [],
  views: new Map(), stopStatus: null, decisions: new Map(), mcpReported: null };
const actions = { edit, regenerate, branch, copy, decide: (call, choice) => state.decisions.get(call.id)?.(choice) };
const MAX_TOOL_ROUNDS = 10; // answers in a row that call tools before the page stops asking again

settings.applyTheme();
api.onKeyNeeded(askKey);

// -- conversations --------------------------------------------------------------------------

function showConversation() {
  const conv = state.conv;
  const nodes = conv ? store.path(conv) : [];
  state.views.clear();
  empty.hidden = nodes.length > 0;
  $('messages').replaceChildren(empty, ...nodes.map((n) => {
    const view = messageView(conv, n, actions);
    state.views.set(n.id, view);
    return view.el;
  }));
  $('title').textContent = conv?.title || 'localchat';
  document.title = conv ? `${conv.title} · localchat` : 'localchat';
  if (conv) localStorage.setItem('localchat.open', conv.id);
  else localStorage.removeItem('localchat.open');
  refreshList();
  $('messages').scrollTop = $('messages').scrollHeight;
}

function refreshList() {
  state.all.sort((a, b) => b.updated - a.updated);
  renderList($('conversations'), state.all, state.conv?.id, $('search').value, {
    open: (conv) => idle() && open(conv),
    rename: async (conv, title) => { conv.title = title; await persist(conv); if (conv === state.conv) showConversation(); },
    remove: async (conv) => {
      if (!idle() || !confirm(`Delete "${conv.title}"?`)) return;
      await store.remove(conv.id);
      state.all = state.all.filter((c) => c !== conv);
      if (state.conv === conv) state.conv = null;
      showConversation();
    },
  });
}

function open(conv) {
  state.conv = conv;
  if (conv?.model && state.models.some((m) => m.id === conv.model)) pickModel(conv.model);
  showConversation();
  $('sidebar').classList.remove('open');
  $('prompt').focus();
}

async function persist(conv) {
  if (!state.all.includes(conv)) state.all.unshift(conv);
  await store.save(conv);
  refreshList();
}

function idle() {
  if (state.busy) toast('An answer is being written: stop it first (Esc).');
  return !state.busy;
}

// -- models ---------------------------------------------------------------------------------

async function loadModels() {
  const select = $('model');
  try {
    state.models = (await api.getJSON('/v1/models')).data;
  } catch (e) {
    select.replaceChildren(new Option('no models: the server refused or failed', ''));
    toast(api.explain(e).message);
    return;
  }
  select.replaceChildren(...state.models.map((m) =>
    new Option(`${m.id}${m.default ? ' (default)' : ''}${m.loaded ? ' · loaded' : ''}`, m.id)));
  pickModel(state.conv?.model || localStorage.getItem('localchat.model') || '');
}

function pickModel(name) {
  const known = state.models.find((m) => m.id === name) || state.models.find((m) => m.default) || state.models[0];
  state.model = known?.id || '';
  $('model').value = state.model;
  showModelInfo(known);
}

async function showModelInfo(model) {
  const info = $('model-info');
  info.textContent = model?.context_length ? `${model.context_length.toLocaleString()} tokens of context` : '';
  if (!model) return;
  try {
    const shown = await api.getJSON('/api/show', { body: { model: model.id } });
    if (state.model === model.id && shown.capabilities) info.textContent += ` · ${shown.capabilities.join(', ')}`;
  } catch { /* a model whose file is missing: the context line is all we know */ }
}

// -- answers --------------------------------------------------------------------------------

// One answer to `user`: a user message, or an answer whose tool calls have run (round > 0). An answer
// that calls MCP tools runs them, each approved, and asks the model again with their results. An
// answer that only repeats calls already run in this turn (small models loop so) runs nothing: the
// model is asked again, beside it, to answer from the results it has, with no tools offered.
async function generate(user, round = user.role === 'assistant' ? 1 : 0, answerNow = false) {
  const conv = state.conv;
  const answer = store.add(conv, user.id, { role: 'assistant', model: state.model, partial: true });
  conv.model = state.model;
  await persist(conv);
  showConversation();
  const view = state.views.get(answer.id);
  const controller = new AbortController();
  state.busy = { controller, answer };
  setBusy(true, view);
  const tools = answerNow ? mcp.toolbox([]) : mcp.toolbox(await mcpServers());
  let body;
  try {
    body = requestBody(conv, user, state.model, state.settings, tools.tools, round);
    if (answerNow) delete body.tools;
  } catch (e) {
    answer.error = { message: `Settings: ${e.message}`, advice: 'Fix it in Settings (⚙).' };
  }
  const t0 = performance.now();
  let first = null;
  let usage = null;
  if (body) {
    const list = $('messages');
    let saved = Date.now();
    const frame = everyFrame(() => {
      if (state.busy?.answer !== answer) return; // the answer has ended since: its last update is done
      const stick = list.scrollHeight - list.scrollTop - list.clientHeight < 120;
      view.update(answer, true);
      if (stick) list.scrollTop = list.scrollHeight;
      if (Date.now() - saved > 2000) { saved = Date.now(); store.save(conv).catch(() => {}); } // a reload keeps most of it
    });
    try {
      await api.streamChat(body, (chunk) => {
        if (chunk.usage) usage = chunk.usage;
        if (applyChunk(answer, chunk)) first ??= performance.now();
        frame();
      }, controller.signal);
    } catch (e) {
      if (e.name === 'AbortError') answer.stopped = true;
      else answer.error = api.explain(e);
    }
  }
  answer.stats = timing(usage, t0, first, performance.now());
  delete answer.partial;
  view.update(answer, false);
  let run = !answer.error && !answer.stopped && answer.tool_calls?.length
    && answer.tool_calls.every((c) => tools.owner.has(c.name));
  const repeated = run && round > 0 && answer.tool_calls.every((c) => callsThisTurn(conv, user).has(callKey(c)));
  if (repeated) {
    for (const call of answer.tool_calls) call.status = 'repeated';
    view.update(answer, false);
    run = false;
  }
  if (run) {
    for (const call of answer.tool_calls) await runCall(call, tools.owner.get(call.name), answer, view, controller.signal);
    if (controller.signal.aborted) answer.stopped = true;
    view.update(answer, false);
  }
  if (run && !answer.stopped && round + 1 >= MAX_TOOL_ROUNDS) toast(`Stopped: ${MAX_TOOL_ROUNDS} answers in a row called tools.`);
  const next = repeated ? () => generate(user, round + 1, true)
    : run && !answer.stopped && round + 1 < MAX_TOOL_ROUNDS ? () => generate(answer, round + 1) : null;
  if (next) view.el.setAttribute('aria-busy', 'false'); // the page stays busy: the next round follows at once
  else {
    state.busy = null;
    setBusy(false, view);
  }
  conv.updated = Date.now();
  await persist(conv);
  if (next) await next();
}

const callKey = (c) => `${c.name} ${c.arguments}`;

// The calls run since the user's last message, up to `node`.
function callsThisTurn(conv, node) {
  const keys = new Set();
  for (let n = node; n && n.role === 'assistant'; n = conv.nodes[n.parent]) {
    for (const c of n.tool_calls || []) if (c.result !== undefined) keys.add(callKey(c));
  }
  return keys;
}

// The MCP servers of the settings, listed once (again when the settings change); a server that
// cannot be used is said once, and the chat goes on without its tools.
async function mcpServers() {
  const found = await mcp.servers(state.settings);
  if (found !== state.mcpReported) {
    state.mcpReported = found;
    const down = found.filter((s) => s.error);
    if (down.length) toast(`MCP: ${down.map((s) => s.error).join(' ')} Its tools are left out.`);
  }
  return found;
}

// One call to an MCP tool: asked (unless that tool is allowed), run through the server's bridge,
// its result (or the refusal, or the failure) kept on the call: it goes back to the model.
async function runCall(call, server, answer, view, signal) {
  call.server = server.name;
  let choice = signal.aborted ? 'deny' : 'run';
  if (choice === 'run' && !mcp.isAllowed(server.url, call.name)) {
    call.status = 'asking';
    view.update(answer, false);
    choice = await new Promise((resolve) => {
      state.decisions.set(call.id, resolve);
      signal.addEventListener('abort', () => resolve('deny'), { once: true });
    });
    state.decisions.delete(call.id);
  }
  if (choice === 'always') mcp.allow(server.url, call.name);
  if (choice === 'deny') {
    Object.assign(call, { status: 'denied', result: 'The user did not allow this tool call.' });
    return;
  }
  call.status = 'running';
  view.update(answer, false);
  try {
    const r = await mcp.call(server.url, call.name, call.arguments);
    Object.assign(call, { status: r.is_error ? 'failed' : 'done', result: r.content });
  } catch (e) {
    Object.assign(call, { status: 'failed', result: `The tool failed: ${api.explain(e).message}` });
  }
  view.update(answer, false);
}

function setBusy(busy, view) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  view?.el.setAttribute('aria-busy', busy ? 'true' : 'false');
  document.body.classList.toggle('busy', busy);
}

function stop() {
  state.busy?.controller.abort();
}

async function send() {
  if (!idle()) return;
  const text = $('prompt').value.trim();
  if (!text && !state.attachments.length) return;
  if (!state.conv) state.conv = store.newConversation(state.model);
  const conv = state.conv;
  if (!Object.keys(conv.nodes).length) conv.title = (text || state.attachments[0].name).replace(/\s+/g, ' ').slice(0, 60);
  const user = store.add(conv, conv.leaf, { role: 'user', content: text,
    ...(state.attachments.length ? { attachments: state.attachments } : {}) });
  $('prompt').value = '';
  state.attachments = [];
  renderAttachments($('attachments'), state.attachments);
  autosize();
  await generate(user);
}

async function edit(node) {
  if (!idle()) return;
  const text = await editInPlace(state.views.get(node.id).el, node.content);
  if (text === null) return;
  const user = store.add(state.conv, node.parent ?? null, { role: 'user', content: text,
    ...(node.attachments ? { attachments: node.attachments } : {}) });
  await generate(user);
}

async function regenerate(answer) {
  if (idle()) await generate(state.conv.nodes[answer.parent]);
}

async function branch(node, step) {
  if (!idle()) return;
  const all = store.siblings(state.conv, node);
  const next = all[all.findIndex((n) => n.id === node.id) + step];
  if (!next) return;
  store.showBranch(state.conv, next);
  showConversation();
  await store.save(state.conv);
}

// -- wiring -----------------------------------------------------------------------------------

function autosize() {
  const p = $('prompt');
  p.style.height = 'auto';
  p.style.height = `${Math.min(p.scrollHeight, window.innerHeight * 0.4)}px`;
}

function toggleStatus(show = $('status').hidden) {
  $('status').hidden = !show;
  $('open-status').setAttribute('aria-expanded', String(show));
  state.stopStatus?.();
  state.stopStatus = show ? watch($('status-body')) : null;
}

async function importFile(file) {
  try {
    const list = store.parseImport(await file.text());
    for (const conv of list) {
      state.all = state.all.filter((c) => c.id !== conv.id);
      await persist(conv);
    }
    toast(`Imported ${list.length} conversation${list.length === 1 ? '' : 's'}`);
  } catch (e) {
    toast(`Import failed: ${e.message}`);
  }
}

function wire() {
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('prompt').addEventListener('input', autosize);
  $('prompt').addEventListener('paste', (e) => {
    const added = pastedAttachment(e, state.attachments);
    if (added) renderAttachments($('attachments'), state.attachments);
  });
  $('attach').addEventListener('click', () => $('attach-file').click());
  $('attach-file').addEventListener('change', async (e) => {
    const problems = await attachFiles(e.target.files, state.attachments);
    e.target.value = '';
    renderAttachments($('attachments'), state.attachments);
    if (problems.length) toast(problems.join(' '));
  });
  $('stop').addEventListener('click', stop);
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && state.busy) { e.preventDefault(); stop(); } });
  $('new-chat').addEventListener('click', () => { if (idle()) open(null); });
  $('search').addEventListener('input', refreshList);
  $('model').addEventListener('change', async (e) => {
    pickModel(e.target.value);
    localStorage.setItem('localchat.model', state.model);
    if (state.conv) { state.conv.model = state.model; await persist(state.conv); }
  });
  $('theme').addEventListener('click', () => toast(`${settings.toggleTheme()} theme`));
  $('open-settings').addEventListener('click', async () => {
    const saved = await settings.edit($('settings'), state.settings);
    if (saved) { state.settings = saved; toast('Settings saved'); }
  });
  $('open-status').addEventListener('click', () => toggleStatus());
  $('close-status').addEventListener('click', () => toggleStatus(false));
  $('open-sidebar').addEventListener('click', () => $('sidebar').classList.add('open'));
  $('close-sidebar').addEventListener('click', () => $('sidebar').classList.remove('open'));
  $('export').addEventListener('click', () =>
    download(`localchat-${new Date().toISOString().slice(0, 10)}.json`, store.exportFile(state.all)));
  $('import').addEventListener('click', () => $('import-file').click());
  $('import-file').addEventListener('change', (e) => { if (e.target.files[0]) importFile(e.target.files[0]); e.target.value = ''; });
  $('messages').addEventListener('click', (e) => {
    const button = e.target.closest('.code-head .copy');
    if (button) copy(button.parentElement.nextElementSibling?.textContent || '');
  });
  $('attachments').addEventListener('click', (e) => {
    const i = e.target.closest('[data-remove]')?.dataset.remove;
    if (i !== undefined) { state.attachments.splice(Number(i), 1); renderAttachments($('attachments'), state.attachments); }
  });
}

async function start() {
  wire();
  const models = loadModels();
  state.all = await store.loadAll().catch((e) => { toast(`This browser keeps no conversations: ${e.message}`); return []; });
  const last = localStorage.getItem('localchat.open');
  state.conv = state.all.find((c) => c.id === last) || null;
  showConversation();
  $('prompt').focus();
  await models;
  if (state.conv?.model) pickModel(state.conv.model);
}

start();
