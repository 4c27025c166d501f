// The messages on screen: one <article> per message of the branch shown. A user message is text
// (never HTML); an answer is sanitised markdown, with its reasoning in a collapsible block, its
// tool calls as cards (an MCP tool's with its approval and result), its numbers (tokens/s, prompt and cached tokens) and any error beneath.

import { render } from './markdown.js';
import { siblings } from './store.js';

const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children.filter(Boolean));
  return node;
};

// actions: { edit(node), regenerate(node), branch(node, step), copy(text), decide(call, 'run' | 'always' | 'deny') }
export function messageView(conv, node, actions) {
  const article = el('article', { class: `msg ${node.role}`, 'data-id': node.id });
  const view = node.role === 'user' ? userParts(node) : answerParts(node, actions);
  article.append(...view.parts, footer(conv, node, actions));
  return { el: article, update: view.update || (() => {}) };
}

function userParts(node) {
  const text = el('div', { class: 'text', text: node.content });
  const files = (node.attachments || []).map((a) => el('details', { class: 'attachment' },
    el('summary', { text: `${a.name} (${a.text.length.toLocaleString()} characters)` }),
    el('pre', { text: a.text })));
  return { parts: [el('div', { class: 'bubble' }, text, ...files)] };
}

function answerParts(node, actions) {
  const reasoningBody = el('div', { class: 'reasoning-body' });
  const reasoningTitle = el('summary', { text: 'Reasoning' });
  const reasoning = el('details', { class: 'reasoning', hidden: '' }, reasoningTitle, reasoningBody);
  const tools = el('div', { class: 'tools' });
  const content = el('div', { class: 'content markdown' });
  const problem = el('div', { class: 'error', role: 'alert', hidden: '' });
  const stats = el('div', { class: 'stats muted' });
  let rendered = null;
  let userToggled = false;
  reasoning.addEventListener('toggle', () => { if (reasoning.dataset.auto !== '1') userToggled = true; });

  function update(n, streaming = false) {
    if (n.reasoning) {
      reasoning.hidden = false;
      reasoningBody.textContent = n.reasoning;
      reasoningTitle.textContent = streaming && !n.content && !n.tool_calls?.length ? 'Reasoning…' : 'Reasoning';
      const open = streaming && !n.content;
      if (!userToggled && reasoning.open !== open) {
        reasoning.dataset.auto = '1';
        reasoning.open = open;
        setTimeout(() => { reasoning.dataset.auto = ''; });
      }
    }
    tools.replaceChildren(...(n.tool_calls || []).map((call) => toolCard(call, actions)));
    if (n.content !== rendered || !streaming) {
      render(content, n.content || '', !streaming);
      rendered = n.content;
    }
    content.classList.toggle('cursor', streaming);
    problem.hidden = !n.error;
    if (n.error) {
      problem.replaceChildren(el('strong', { text: n.error.message }), n.error.advice ? el('p', { text: n.error.advice }) : '');
    }
    stats.textContent = statsLine(n, streaming);
  }
  update(node);
  return { parts: [reasoning, tools, content, problem, stats], update };
}

const STATUS = { asking: 'Run this tool?', running: 'running…', denied: 'not run: you declined',
  repeated: 'not run again: the same call as before (the model was asked to answer from its result)' };

function toolCard(call, actions) {
  let args = call.arguments || '';
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* streaming, or not JSON: as written */ }
  const card = el('div', { class: 'tool-call', role: 'group', 'aria-label': `Tool call ${call.name}`, 'data-status': call.status || '' },
    el('div', { class: 'tool-name' }, el('span', { class: 'muted', text: 'tool call ' }), el('code', { text: call.name }),
      call.server ? el('span', { class: 'muted', text: ` · ${call.server}` }) : null),
    el('pre', { class: 'tool-args', text: args }));
  if (STATUS[call.status]) card.append(el('div', { class: 'tool-status muted', text: STATUS[call.status] }));
  if (call.status === 'asking') {
    const decide = (choice) => () => actions.decide(call, choice);
    card.append(el('div', { class: 'tool-approve' },
      el('button', { type: 'button', class: 'primary run', onclick: decide('run') }, 'Run'),
      el('button', { type: 'button', class: 'always', onclick: decide('always') }, `Always allow ${call.name}`),
      el('button', { type: 'button', class: 'deny', onclick: decide('deny') }, 'Deny')));
  }
  if (call.result !== undefined && call.status !== 'denied') {
    const failed = call.status === 'failed';
    card.append(el('details', { class: `tool-result${failed ? ' failed' : ''}`, open: '' },
      el('summary', { text: failed ? 'Error' : 'Result' }), el('pre', { text: call.result })));
  }
  return card;
}

function statsLine(n, streaming) {
  if (streaming) return n.model ? `${n.model} · writing…` : 'waiting for the model…';
  if (n.partial) return `${n.model || ''} · interrupted: the page was closed while this was written`;
  const s = n.stats || {};
  const parts = [];
  if (n.model) parts.push(n.model);
  if (s.completion_tokens != null) parts.push(`${s.completion_tokens} tokens`);
  if (s.tokens_per_second != null) parts.push(`${s.tokens_per_second.toFixed(1)} tokens/s`);
  if (s.prompt_tokens != null) parts.push(`prompt ${s.prompt_tokens} (${s.cached_tokens ?? 0} cached)`);
  if (s.first_token_seconds != null) parts.push(`first token ${s.first_token_seconds.toFixed(2)} s`);
  if (n.stopped) parts.push('stopped');
  return parts.join(' · ');
}

function footer(conv, node, actions) {
  const bar = el('div', { class: 'actions' });
  const all = siblings(conv, node);
  if (all.length > 1) {
    const i = all.findIndex((s) => s.id === node.id);
    bar.append(
      el('button', { type: 'button', class: 'icon', 'aria-label': 'Previous version', onclick: () => actions.branch(node, -1) }, '‹'),
      el('span', { class: 'branch muted', text: `${i + 1}/${all.length}` }),
      el('button', { type: 'button', class: 'icon', 'aria-label': 'Next version', onclick: () => actions.branch(node, 1) }, '›'));
    if (i === 0) bar.children[0].disabled = true;
    if (i === all.length - 1) bar.children[2].disabled = true;
  }
  if (node.role === 'user') {
    bar.append(el('button', { type: 'button', class: 'edit', onclick: () => actions.edit(node) }, 'Edit'));
  } else {
    bar.append(el('button', { type: 'button', class: 'copy-answer', onclick: () => actions.copy(node.content || '') }, 'Copy'),
      el('button', { type: 'button', class: 'regenerate', onclick: () => actions.regenerate(node) }, 'Regenerate'));
  }
  return bar;
}

// An inline editor for a user message; resolves with the new text, or null when cancelled.
export function editInPlace(article, text) {
  return new Promise((resolve) => {
    const bubble = article.querySelector('.bubble');
    const area = el('textarea', { class: 'edit-area', 'aria-label': 'Edit the message', rows: '3' });
    area.value = text;
    const done = (value) => { form.replaceWith(bubble); resolve(value); };
    const form = el('form', { class: 'editor', onsubmit: (e) => { e.preventDefault(); done(area.value.trim() || null); } },
      area, el('div', { class: 'buttons' },
        el('button', { type: 'button', onclick: () => done(null) }, 'Cancel'),
        el('button', { type: 'submit', class: 'primary' }, 'Send')));
    area.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
      if (e.key === 'Escape') { e.stopPropagation(); done(null); }
    });
    bubble.replaceWith(form);
    area.focus();
  });
}
