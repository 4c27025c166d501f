// Conversations, kept in this browser's IndexedDB. A conversation is a tree of messages: an edited
// question or a regenerated answer is a sibling of the one it replaces, so every branch is kept;
// `leaf` is the last message of the branch on screen.
//
// { id, title, created, updated, model, leaf, nodes: { id: node } }
// node: { id, parent, role: 'user' | 'assistant', content, created, attachments?, reasoning?,
//         tool_calls?: [{ id, name, arguments }], model?, stats?, error?: { message, advice }, stopped?,
//         partial? (still being written, or the page closed while it was) }

const DB = 'localchat';
const STORE = 'conversations';
let db = null;

function open() {
  if (db) return db;
  db = new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: 'id' });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  return db;
}

async function run(mode, work) {
  const tx = (await open()).transaction(STORE, mode);
  const result = work(tx.objectStore(STORE));
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve(result.result);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

export const loadAll = () => run('readonly', (s) => s.getAll());
export const save = (conv) => run('readwrite', (s) => s.put(conv));
export const remove = (id) => run('readwrite', (s) => s.delete(id));

export const newId = () => crypto.randomUUID();

export function newConversation(model) {
  const now = Date.now();
  return { id: newId(), title: 'New chat', created: now, updated: now, model, leaf: null, nodes: {} };
}

// Add a message under `parent` (null: a first message) and show its branch.
export function add(conv, parent, fields) {
  const node = { id: newId(), parent, content: '', created: Date.now(), ...fields };
  conv.nodes[node.id] = node;
  conv.leaf = node.id;
  conv.updated = node.created;
  return node;
}

// The messages from the first to the leaf.
export function path(conv, leaf = conv.leaf) {
  const out = [];
  for (let id = leaf; id; id = conv.nodes[id]?.parent) out.unshift(conv.nodes[id]);
  return out;
}

export function children(conv, parent) {
  return Object.values(conv.nodes).filter((n) => (n.parent ?? null) === parent).sort((a, b) => a.created - b.created);
}

export const siblings = (conv, node) => children(conv, node.parent ?? null);

// Show the branch through `node`: follow its latest replies down to a leaf.
export function showBranch(conv, node) {
  let leaf = node;
  for (let next; (next = children(conv, leaf.id).at(-1)); ) leaf = next;
  conv.leaf = leaf.id;
}

export function matches(conv, query) {
  const q = query.trim().toLowerCase();
  if (!q) return true;
  return conv.title.toLowerCase().includes(q)
    || Object.values(conv.nodes).some((n) => (n.content || '').toLowerCase().includes(q));
}

// Export and import: one JSON file holding whole conversations.
export function exportFile(conversations) {
  return JSON.stringify({ format: 'localchat-conversations', version: 1, exported: new Date().toISOString(),
    conversations }, null, 1);
}

export function parseImport(text) {
  const data = JSON.parse(text);
  const list = Array.isArray(data) ? data : data?.conversations;
  if (!Array.isArray(list)) throw new Error('not a localchat export: no "conversations" list');
  return list.map((c, i) => {
    if (typeof c?.id !== 'string' || typeof c.nodes !== 'object' || c.nodes === null) {
      throw new Error(`conversation ${i} has no id or no messages`);
    }
    for (const n of Object.values(c.nodes)) {
      if (typeof n?.id !== 'string' || !['user', 'assistant'].includes(n.role)) {
        throw new Error(`conversation ${i}: a message has no id or an unknown role`);
      }
    }
    return { title: 'Imported chat', created: Date.now(), updated: Date.now(), model: '', ...c,
      leaf: c.nodes[c.leaf] ? c.leaf : null };
  });
}
