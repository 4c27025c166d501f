// Model output → safe HTML: markdown (marked, GitHub flavour: tables, fenced code), math between
// $…$, $$…$$, \(…\) and \[…\] (KaTeX), sanitised by DOMPurify before it touches the page. Code
// blocks get a copy button and highlighting (highlight.js); KaTeX and highlight.js load on first use.

import { Marked } from '../vendor/marked/marked.esm.js';
import DOMPurify from '../vendor/dompurify/purify.es.js';

const escape = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function math(tex, display) {
  const tag = display ? 'div' : 'span';
  return `<${tag} class="math${display ? ' display' : ''}" data-tex="${escape(tex)}">${escape(tex)}</${tag}>`;
}

const mathBlock = {
  name: 'mathBlock',
  level: 'block',
  start: (src) => src.match(/^ {0,3}(\$\$|\\\[)/m)?.index,
  tokenizer(src) {
    const m = /^ {0,3}\$\$([\s\S]+?)\$\$ *(?:\n|$)/.exec(src) || /^ {0,3}\\\[([\s\S]+?)\\\] *(?:\n|$)/.exec(src);
    if (m) return { type: 'mathBlock', raw: m[0], text: m[1].trim() };
    return undefined;
  },
  renderer: (token) => math(token.text, true),
};

const mathInline = {
  name: 'mathInline',
  level: 'inline',
  start: (src) => src.match(/\$|\\\(/)?.index,
  tokenizer(src) {
    let m = /^\$\$([\s\S]+?)\$\$/.exec(src);
    if (m) return { type: 'mathInline', raw: m[0], text: m[1].trim(), display: true };
    // $…$: no space inside the dollars, no digit after the closing one ($5 and $10 stay money)
    m = /^\$(?![\s$])((?:\\.|[^\\$\n])+?)(?<![\s\\])\$(?!\d)/.exec(src) || /^\\\(([\s\S]+?)\\\)/.exec(src);
    if (m) return { type: 'mathInline', raw: m[0], text: m[1], display: false };
    return undefined;
  },
  renderer: (token) => math(token.text, token.display),
};

const marked = new Marked({ gfm: true, breaks: false, extensions: [mathBlock, mathInline] });

// Forms and styles in a model's answer could dress up as the page itself: they are removed too.
const PURIFY = { FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'option'],
  FORBID_ATTR: ['style'] };
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.getAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

export function toHTML(markdown) {
  return DOMPurify.sanitize(marked.parse(markdown), PURIFY);
}

// Fill `el` with the rendered markdown; `final`: the text is complete (highlight its code).
export function render(el, markdown, final) {
  el.innerHTML = toHTML(markdown);
  decorate(el, final);
}

export function decorate(el, final) {
  for (const pre of el.querySelectorAll('pre')) addCopy(pre);
  const maths = el.querySelectorAll('.math[data-tex]');
  if (maths.length) katex().then((k) => maths.forEach((m) => typeset(k, m))).catch(() => {});
  const codes = el.querySelectorAll('pre code');
  if (final && codes.length) highlighter().then((h) => codes.forEach((c) => h.highlightElement(c))).catch(() => {});
}

function addCopy(pre) {
  const head = document.createElement('div');
  head.className = 'code-head';
  const lang = document.createElement('span');
  lang.textContent = (pre.querySelector('code')?.className.match(/language-([\w+#-]+)/) || [])[1] || 'text';
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'copy';
  copy.textContent = 'Copy';
  copy.setAttribute('aria-label', 'Copy the code');
  head.append(lang, copy);
  pre.before(head);
}

let katexLoad = null;
function katex() {
  katexLoad ??= new Promise((resolve, reject) => {
    const css = document.createElement('link');
    css.rel = 'stylesheet';
    css.href = '/ui/vendor/katex/katex.min.css';
    const script = document.createElement('script');
    script.src = '/ui/vendor/katex/katex.min.js';
    script.onload = () => resolve(window.katex);
    script.onerror = reject;
    document.head.append(css, script);
  });
  return katexLoad;
}

const typeset_cache = new Map();
function typeset(k, el) {
  const display = el.classList.contains('display');
  const key = `${display}:${el.dataset.tex}`;
  let html = typeset_cache.get(key);
  if (html === undefined) {
    html = DOMPurify.sanitize(k.renderToString(el.dataset.tex, { displayMode: display, throwOnError: false }));
    if (typeset_cache.size > 500) typeset_cache.clear();
    typeset_cache.set(key, html);
  }
  el.innerHTML = html;
  el.removeAttribute('data-tex');
}

let hljsLoad = null;
function highlighter() {
  hljsLoad ??= import('../vendor/highlight/highlight.min.js').then((m) => {
    m.default.configure({ ignoreUnescapedHTML: true });
    return m.default;
  });
  return hljsLoad;
}
