"""Drafts from a smaller model (speculative decoding, llama-server's --model-draft).

A model entry's `draft` names another registered model with the same vocabulary (Qwen2.5-Coder
0.5B for the 1.5B). The scheduler owns a second llama context on it, one sequence per slot (its
own KV stream, as the main context's), holding a prefix of the slot's tokens. To draft, a
sequence brings the draft context's cells in line with its tokens (the common prefix stays, the
rest is removed, the missing tokens are decoded in chunks), then the draft model writes up to
`draft_max` tokens greedily, one decode each, and stops early where its most likely token's
probability (among its 10 most likely, as llama-server's draft sampler has it) is below
`draft_p_min`. The scheduler verifies the draft as it verifies an n-gram draft (drafts.py): the
text is the text without drafts. The cells of rejected drafted tokens go from both contexts.

All of it runs on the scheduler's thread, inside its step: each drafted token is one decode of
the draft model, and a sequence's first draft decodes its whole prompt in the draft model first
(once; a slot's next request reuses what the draft context holds, as the main context does)."""

from __future__ import annotations

import os

import llama_cpp as C
import numpy as np

from ...errors import ModelUnavailable
from ..llama.batch import Batch
from ..llama.model import Model
from ..params import N_BATCH, SWA_FULL, Draft

VOCAB_MAX_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE: n_vocab may differ by this much
VOCAB_CHECK_START = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID: token texts compared from this id on
TOP = 10  # the draft's probability is its best token's among its TOP most likely (llama-server's draft top_k)


def incompatibility(target: Model, draft: Model) -> str | None:
    """Why `draft` cannot draft for `target` (None: it can), checked as llama.cpp's
    common_speculative_are_compatible does: the vocabulary's type, BOS and EOS and whether they are
    added, sizes within VOCAB_MAX_DIFFERENCE, and the same text for every token from id 5 on."""
    tv, dv = target.vocab, draft.vocab
    if C.llama_vocab_type(tv) != C.llama_vocab_type(dv):
        return f"the tokenizers differ in kind ({C.llama_vocab_type(dv)} against {C.llama_vocab_type(tv)})"
    for what, get in (("BOS token", C.llama_vocab_bos), ("EOS token", C.llama_vocab_eos),
                      ("adding of BOS", C.llama_vocab_get_add_bos), ("adding of EOS", C.llama_vocab_get_add_eos)):
        if get(tv) != get(dv):
            return f"the {what} differs ({get(dv)} against {get(tv)})"
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_DIFFERENCE:
        return f"the vocabularies' sizes differ by more than {VOCAB_MAX_DIFFERENCE} ({draft.n_vocab} against {target.n_vocab})"
    for i in range(VOCAB_CHECK_START, min(target.n_vocab, draft.n_vocab)):
        a, b = C.llama_vocab_get_text(tv, i), C.llama_vocab_get_text(dv, i)
        if a != b:
            return f"token {i} differs ({b!r} against {a!r})"
    return None


def check_compatible(target: Model, draft: Model) -> None:
    why = incompatibility(target, draft)
    if why is not None:
        raise ModelUnavailable(f"the draft model {draft.path.name} cannot draft for {target.path.name}: their "
                               f"vocabularies are not the same ({why}); a draft model must share the model's "
                               "tokenizer (a smaller model of the same family)", param="model")


class DraftContext:
    """The draft model's llama context: `parallel` sequences of `n_ctx` tokens, one per slot;
    `cached[seq_id]` the tokens whose cells each holds, in order."""

    def __init__(self, model: Model, target: Model, settings: Draft, *, n_ctx: int, parallel: int,
                 n_threads: int | None = None) -> None:
        self.model, self.settings = model, settings
        self.n_vocab = min(model.n_vocab, target.n_vocab)  # a drafted id the target lacks would fail its decode
        cparams = C.llama_context_default_params()
        cparams.n_ctx = n_ctx * parallel
        cparams.n_seq_max = parallel
        cparams.kv_unified = False  # one KV stream per slot, as the main context (scheduler.py)
        cparams.n_batch = cparams.n_ubatch = N_BATCH
        cparams.n_threads = cparams.n_threads_batch = n_threads or os.cpu_count() or 1
        cparams.swa_full = SWA_FULL
        self.ctx = C.llama_init_from_model(model.ptr, cparams)
        if not self.ctx:
            raise ModelUnavailable(f"llama.cpp could not create {parallel} draft slots of {n_ctx} tokens for "
                                   f"{model.path}")
        self.mem = C.llama_get_memory(self.ctx)
        self.batch = Batch(N_BATCH)
        self.cells: list[list[int]] = [[] for _ in range(parallel)]

    def drafter(self, seq_id: int, history: list[int]) -> "ModelDrafter":
        return ModelDrafter(self, seq_id, history)

    def draft(self, seq_id: int, tokens: list[int], n: int) -> list[int]:
        """Up to n tokens the draft model writes greedily after `tokens` (none when it fails)."""
        if not self._sync(seq_id, tokens):
            return []
        cached, out = self.cells[seq_id], []
        while True:
            logits = np.ctypeslib.as_array(C.llama_get_logits_ith(self.ctx, -1), shape=(self.model.n_vocab,))
            logits = logits[: self.n_vocab]
            best = int(logits.argmax())
            top = np.partition(logits, -TOP)[-TOP:] if self.n_vocab > TOP else logits
            if 1.0 / float(np.exp(top - logits[best], dtype=np.float64).sum()) < self.settings.p_min:
                break
            out.append(best)
            if len(out) >= n or best in self.model.eog:
                break
            if not self._decode(seq_id, [best], len(cached)):
                break
        return out

    def cut(self, seq_id: int, n: int) -> None:
        """Keep the sequence's first n tokens' cells (a rejected draft's go)."""
        cached = self.cells[seq_id]
        if n < len(cached):
            if not C.llama_memory_seq_rm(self.mem, seq_id, n, -1):
                C.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
                n = 0
            del cached[n:]

    def forget(self, seq_id: int) -> None:
        C.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
        self.cells[seq_id].clear()

    def _sync(self, seq_id: int, tokens: list[int]) -> bool:
        """Make the sequence hold `tokens`' cells, the last one decoded now (its logits are the
        next token's): what it holds in common with them stays, the rest goes, the missing are decoded."""
        cached = self.cells[seq_id]
        # most often it holds a prefix (the tokens up to the last draft's kept ones): no token-by-token walk
        same = len(cached) if tokens[:len(cached)] == cached else len(os.path.commonprefix([cached, tokens]))
        self.cut(seq_id, min(same, len(tokens) - 1))
        n = len(cached)
        while n < len(tokens):
            if not self._decode(seq_id, tokens[n:n + N_BATCH], n):
                return False
            n = len(cached)
        return True

    def _decode(self, seq_id: int, tokens: list[int], pos: int) -> bool:
        """Decode tokens at positions pos…, logits for the last; False (and the sequence emptied) on failure."""
        for i, token in enumerate(tokens):
            self.batch.set(i, token, pos + i, seq_id, i == len(tokens) - 1)
        if self.batch.decode(self.ctx, len(tokens)) != 0:
            self.forget(seq_id)
            return False
        self.cells[seq_id].extend(tokens)
        return True

    def close(self) -> None:
        if self.ctx:
            self.batch.close()
            C.llama_free(self.ctx)
            self.ctx = None


class ModelDrafter:
    """A sequence's drafts from the draft model (drafts.Drafter): used as they are, no chances."""

    def __init__(self, context: DraftContext, seq_id: int, history: list[int]) -> None:
        self.context, self.seq_id = context, seq_id
        self.tokens = list(history)  # the sequence's tokens: the prompt, then each token written
        self.drafted = self.kept = 0  # totals, for the log and the bench
        self._base = 0  # tokens before the last draft

    def push(self, token: int) -> None:
        self.tokens.append(token)

    def propose(self, room: int) -> tuple[list[int], None]:
        settings = self.context.settings
        n = min(settings.max, room)
        if n <= 0 or n < settings.min:
            return [], None
        self._base = len(self.tokens)
        draft = self.context.draft(self.seq_id, self.tokens, n)
        return (draft if len(draft) >= max(settings.min, 1) else []), None

    def verified(self, drafted: int, kept: int) -> None:
        self.drafted += drafted
        self.kept += kept
        self.context.cut(self.seq_id, self._base + kept)  # the rejected drafted tokens' cells go
