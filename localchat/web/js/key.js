// The API key dialog: shown when the server answers 401; one dialog however many requests wait.

import { apiKey } from './api.js';

const $ = (id) => document.getElementById(id);

let keyWait = null;
export function askKey(wrong) {
  const dialog = $('key-dialog');
  if (dialog.open) return keyWait;
  $('key-why').textContent = wrong
    ? 'The server refused this key. Enter the key it was started with (--api-key).'
    : 'This server needs an API key: the one it was started with (--api-key). It is kept in this browser.';
  $('key-input').value = '';
  keyWait = new Promise((resolve) => {
    $('key-form').onsubmit = (e) => {
      e.preventDefault();
      apiKey.set($('key-input').value.trim());
      dialog.close();
      resolve(true);
    };
    $('key-cancel').onclick = () => { dialog.close(); resolve(false); };
    dialog.oncancel = () => resolve(false);
  });
  dialog.showModal();
  return keyWait;
}
