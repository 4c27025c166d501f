// The server's own APIs: JSON requests with the API key (asked for once, kept in localStorage),
// the chat stream (server-sent events), and errors turned into something a person can act on.

const KEY = 'localchat.apiKey';

export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `the server answered ${status}`);
    this.status = status;
    this.code = error?.code || null;
    this.type = error?.type || null;
    this.param = error?.param || null;
  }
}

export const apiKey = {
  get: () => localStorage.getItem(KEY) || '',
  set: (key) => (key ? localStorage.setItem(KEY, key) : localStorage.removeItem(KEY)),
};

let askKey = async () => false; // set by the page: shows the key dialog, resolves true once a key is saved
export function onKeyNeeded(ask) { askKey = ask; }

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json'; // the server refuses a browser POST that is not JSON
  const key = apiKey.get();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// fetch with the key; a 401 asks for the key and tries again (until the user cancels).
export async function request(path, { body, signal } = {}) {
  for (let wrong = false; ; wrong = true) {
    const response = await fetch(path, {
      method: body === undefined ? 'GET' : 'POST',
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    if (response.status !== 401) return response;
    if (!(await askKey(wrong || !!apiKey.get()))) throw await failure(response);
  }
}

async function failure(response) {
  let error = null;
  try { error = (await response.json()).error; } catch { /* not JSON */ }
  if (typeof error === 'string') error = { message: error };
  return new ApiError(response.status, error);
}

export async function getJSON(path, options) {
  const response = await request(path, options);
  if (!response.ok) throw await failure(response);
  return response.json();
}

// POST /v1/chat/completions with stream: true; calls onChunk(chunk) for every SSE chunk. Resolves at
// [DONE]; rejects with ApiError (before or during the stream) or the fetch's AbortError (Stop).
export async function streamChat(body, onChunk, signal) {
  const response = await request('/v1/chat/completions', { body: { ...body, stream: true }, signal });
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let finished = false; // [DONE] came: read on to the end of the response, so the request ends cleanly
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (!data || finished) continue;
      if (data === '[DONE]') { finished = true; continue; }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(500, chunk.error); // an error after the stream began
      onChunk(chunk);
    }
  }
}

// What went wrong, and what to do about it.
export function explain(err) {
  if (err instanceof ApiError) return { message: err.message, advice: advice(err) };
  if (err instanceof TypeError) {
    return { message: 'The server cannot be reached.',
      advice: 'Is `localchat serve` still running? Start it again, then press Regenerate.' };
  }
  return { message: String(err?.message || err), advice: '' };
}

function advice(err) {
  switch (err.code) {
    case 'context_length_exceeded':
      return 'The conversation is longer than the model\'s context. Start a new chat, send less text, or pick a model with a longer context.';
    case 'queue_full':
      return 'The server is busy with other requests. Wait a few seconds, then press Regenerate.';
    case 'model_not_found':
      return 'Pick another model from the list.';
    case 'model_unavailable':
      return 'The model could not be loaded (the server\'s log says why). Pick another model.';
    case 'engine_crashed':
    case 'engine_error':
      return 'The model failed while answering (see the server\'s log). Press Regenerate to try again.';
    case 'invalid_api_key':
      return 'Enter the key the server was started with (Settings → API key).';
    default:
  }
  if (err.status === 403) return 'The server refused this page (see the message).';
  if (err.status === 413) return 'The message is larger than the server accepts. Send less text.';
  if (err.status >= 500) return 'The server failed (see its log). Press Regenerate to try again.';
  if (err.param) return `Check "${err.param}" in Settings (sampling, JSON schema, extra fields).`;
  return '';
}
