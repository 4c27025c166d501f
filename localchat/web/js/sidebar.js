// The conversation list: open, rename (in place), delete; filtered by the search box.

import { matches } from './store.js';

function button(text, label, onclick, cls = 'icon') {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = cls;
  b.textContent = text;
  if (label) b.setAttribute('aria-label', label);
  b.addEventListener('click', onclick);
  return b;
}

const TRASH = '<svg viewBox="0 0 24 24" width="15" height="15" aria-hidden="true"><path d="M4 7h16M10 11v6M14 11v6M6 7l1 13h10l1-13M9 7V4h6v3" fill="none" stroke="currentColor" stroke-width="1.6" stroke-linejoin="round"/></svg>';

// handlers: { open(conv), rename(conv, title), remove(conv) }
export function renderList(ul, conversations, currentId, query, handlers) {
  const shown = conversations.filter((c) => matches(c, query));
  ul.replaceChildren(...shown.map((conv) => {
    const li = document.createElement('li');
    li.dataset.id = conv.id;
    const open = button(conv.title, null, () => handlers.open(conv), 'open');
    if (conv.id === currentId) open.setAttribute('aria-current', 'true');
    const rename = button('✎', `Rename ${conv.title}`, () => renameInPlace(li, open, conv, handlers.rename));
    const remove = button('', `Delete ${conv.title}`, () => handlers.remove(conv));
    remove.innerHTML = TRASH; // our own markup, not the conversation's
    li.append(open, rename, remove);
    return li;
  }));
  if (!shown.length) {
    const li = document.createElement('li');
    li.className = 'muted none';
    li.textContent = query.trim() ? 'no conversation matches' : 'no conversations yet';
    ul.append(li);
  }
}

function renameInPlace(li, open, conv, rename) {
  const input = document.createElement('input');
  input.value = conv.title;
  input.setAttribute('aria-label', 'New name');
  input.className = 'rename';
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    input.replaceWith(open);
    const title = input.value.trim();
    if (save && title && title !== conv.title) rename(conv, title);
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); finish(true); }
    if (e.key === 'Escape') { e.stopPropagation(); finish(false); }
  });
  input.addEventListener('blur', () => finish(true));
  open.replaceWith(input);
  input.select();
}
