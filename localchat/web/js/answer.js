// One answer: the request for a branch of the conversation, the stream's chunks folded into the
// answer (content, reasoning, tool calls), and its numbers.

import { requestFields } from './settings.js';
import { path } from './store.js';

// tools: the MCP servers' (added to any in the extra fields). round: answers since the user's message
// that called tools; after one, tool_choice is left to the model (as OpenAI's Agents SDK resets it),
// or a forced choice would call again forever.
export function requestBody(conv, user, model, settings, tools = [], round = 0) {
  const body = { model, messages: messagesFor(conv, user, settings.system), stream_options: { include_usage: true },
    ...requestFields(settings) };
  if (tools.length) body.tools = [...(body.tools || []), ...tools];
  if (round > 0) delete body.tool_choice;
  return body;
}

function messagesFor(conv, last, system) {
  const out = system ? [{ role: 'system', content: system }] : [];
  for (const n of path(conv, last.id)) {
    if (n.role === 'user') {
      const files = (n.attachments || []).map((a) => `\n\n--- ${a.name} ---\n${a.text}\n--- end of ${a.name} ---`);
      out.push({ role: 'user', content: n.content + files.join('') });
    } else {
      const m = { role: 'assistant', content: n.content || '' }; // a failed answer stays, empty: turns alternate
      if (n.tool_calls?.length) {
        m.tool_calls = n.tool_calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      }
      out.push(m);
      for (const c of n.tool_calls || []) { // the results of the calls the page ran (MCP tools)
        if (c.result !== undefined) out.push({ role: 'tool', tool_call_id: c.id, content: c.result });
      }
    }
  }
  return out;
}

// Run fn at the next frame, once however often it is asked for before then (a timer stands in
// where frames do not come: a hidden tab).
export function everyFrame(fn) {
  let queued = false;
  const run = () => { if (queued) { queued = false; fn(); } };
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(run);
    setTimeout(run, 100);
  };
}

export function applyChunk(answer, chunk) {
  if (chunk.model) answer.model = chunk.model;
  for (const c of chunk.choices || []) {
    const d = c.delta || {};
    if (d.content) answer.content += d.content;
    if (d.reasoning_content) answer.reasoning = (answer.reasoning || '') + d.reasoning_content;
    for (const t of d.tool_calls || []) {
      answer.tool_calls ??= [];
      const call = (answer.tool_calls[t.index] ??= { id: '', name: '', arguments: '' });
      if (t.id) call.id = t.id;
      if (t.function?.name) call.name = t.function.name;
      if (t.function?.arguments) call.arguments += t.function.arguments;
    }
    if (c.finish_reason) answer.finish = c.finish_reason;
  }
  return !!(chunk.choices?.[0]?.delta && Object.keys(chunk.choices[0].delta).some((k) => k !== 'role' && chunk.choices[0].delta[k]));
}

export function timing(usage, t0, first, end) {
  const s = { first_token_seconds: first ? (first - t0) / 1000 : null };
  if (usage) {
    Object.assign(s, { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens,
      cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0 });
    if (first && usage.completion_tokens > 1 && end > first) {
      s.tokens_per_second = (usage.completion_tokens - 1) / ((end - first) / 1000);
    }
  }
  return s;
}
