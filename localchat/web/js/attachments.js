// Text attachments: a long paste becomes an attachment instead of flooding the message box, and
// text files can be attached. Their text goes into the message, each between marker lines.

export const LONG_PASTE = 2000; // characters
const MAX_FILE = 2 * 1024 * 1024; // bytes

export function pastedAttachment(event, attachments) {
  const text = event.clipboardData?.getData('text/plain') || '';
  if (text.length < LONG_PASTE) return false;
  event.preventDefault();
  const n = attachments.filter((a) => a.name.startsWith('pasted')).length + 1;
  attachments.push({ name: `pasted-${n}.txt`, text });
  return true;
}

// Adds the files that are text; returns what was refused, as sentences.
export async function attachFiles(files, attachments) {
  const problems = [];
  for (const file of files) {
    if (file.type.startsWith('image/')) {
      problems.push(`${file.name}: images need a model that reads them; this server takes text for now.`);
    } else if (file.size > MAX_FILE) {
      problems.push(`${file.name}: larger than 2 MB.`);
    } else {
      const text = await file.text();
      if (text.includes('\u0000')) problems.push(`${file.name}: not a text file.`);
      else attachments.push({ name: file.name, text });
    }
  }
  return problems;
}

export function renderAttachments(ul, attachments) {
  ul.replaceChildren(...attachments.map((a, i) => {
    const li = document.createElement('li');
    li.className = 'chip';
    li.title = a.text.slice(0, 500);
    li.textContent = `${a.name} · ${a.text.length.toLocaleString()} characters `;
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.className = 'icon';
    remove.dataset.remove = String(i);
    remove.textContent = '✕';
    remove.setAttribute('aria-label', `Remove ${a.name}`);
    li.append(remove);
    return li;
  }));
}
