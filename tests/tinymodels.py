"""Tiny llama-architecture GGUF models for tests: an SPM vocabulary with byte fallback, the
family's control tokens and chat template, 2 layers of width 64, random F32 weights."""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

from localchat.families import Family

N_EMBD, N_FF, N_HEAD, N_LAYER = 64, 128, 4, 2
WORDS = ["the", "a", "and", "to", "of", "hello", "world", "sea", "call", "tool", "name", "value", "true", "false"]


def extra_tokens(family: Family) -> list[str]:
    """Single tokens for the text that opens calls, the codec's markup and the think tags."""
    codec = family.codec
    texts = (codec.trigger, *codec.visible_tokens, *(family.reasoning or ()), *value_ends(family))
    return [t for t in dict.fromkeys(texts) if t not in family.control_tokens]


def value_ends(family: Family) -> tuple[str, ...]:
    """The tag that ends an XML-style argument's raw value: a random model never spells it out
    letter by letter, so the tests' models have it as one token (and the tests favour it)."""
    xml = getattr(getattr(family.codec, "shape", None), "xml", None)
    return (xml.value_close,) if xml else ()


def vocabulary(family: Family, extra: tuple[str, ...] = (), control: tuple[str, ...] = ()) -> tuple[list[str], list[int]]:
    """control: more control tokens (a chat template's own)."""
    tokens, types = ["<unk>"], [TokenType.UNKNOWN]
    for t in dict.fromkeys((*family.control_tokens, *control)):
        tokens.append(t)
        types.append(TokenType.CONTROL)
    # Single tokens for the tool-call markers and think tags, as real vocabularies have them.
    for t in dict.fromkeys(t for t in (*extra_tokens(family), *extra) if t not in tokens):
        tokens.append(t)
        types.append(TokenType.USER_DEFINED)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(TokenType.BYTE)
    pieces = ["▁"] + list(string.ascii_letters + string.digits + string.punctuation) + ["▁" + w for w in WORDS]
    tokens += pieces
    types += [TokenType.NORMAL] * len(pieces)
    return tokens, types


FIM = {"pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>", "mid": "<|fim_middle|>", "rep": "<|repo_name|>",
       "sep": "<|file_sep|>"}  # Qwen2.5-Coder's


def write_tiny_model(path: Path, family: Family, *, n_ctx: int = 512, seed: int = 0,
                     chat_template: str | None = "family", extra: tuple[str, ...] = (), fim: bool = False,
                     pooling: int | None = None, split_tensors: int = 0, padding: int = 0,
                     control: tuple[str, ...] = ()) -> Path:
    """fim: the vocabulary has fill-in-the-middle tokens, declared in the GGUF as llama.cpp reads
    them; pooling: the GGUF declares this pooling type (1 mean, 2 cls, 3 last), as embedding models do;
    split_tensors: write a split GGUF (`NAME-00001-of-0000N.gguf`, …) of this many tensors a part,
    as gguf-split does; the first part's path is returned; padding: a metadata string of this many
    bytes (llama.cpp ignores it) makes the file that much larger; control: more control tokens
    (those a chat template uses)."""
    tokens, types = vocabulary(family, (*extra, *(FIM.values() if fim else ())), control)
    index = {t: i for i, t in enumerate(tokens)}
    eos = family.eos_token if family.eos_token in index else family.stop_tokens[0]
    rng = np.random.default_rng(seed)

    w = GGUFWriter(str(path), "llama", split_max_tensors=split_tensors)
    w.add_name(f"tiny-{family.name}")
    w.add_context_length(n_ctx)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([0.0 if k != TokenType.NORMAL else -float(len(t)) * -1.0 for t, k in zip(tokens, types)])
    w.add_token_types([int(k) for k in types])
    w.add_unk_token_id(0)
    if family.bos_token:
        w.add_bos_token_id(index[family.bos_token])
    w.add_eos_token_id(index[eos])
    w.add_add_bos_token(bool(family.bos_token))
    w.add_add_space_prefix(False)
    if chat_template:
        w.add_chat_template(family.template if chat_template == "family" else chat_template)
    if fim:
        for key, text in FIM.items():
            w.add_uint32(f"tokenizer.ggml.fim_{key}_token_id", index[text])
    if pooling is not None:
        w.add_uint32(f"{w.arch}.pooling_type", pooling)
    if padding:
        w.add_string("test.padding", "x" * padding)

    def tensor(name: str, *shape: int, scale: float = 0.1) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    n_vocab = len(tokens)
    tensor("token_embd.weight", n_vocab, N_EMBD, scale=1.0)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    tensor("output.weight", n_vocab, N_EMBD, scale=1.0)
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{name}.weight", N_EMBD, N_EMBD)
        tensor(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_tensors:
        return next(iter(sorted(path.parent.glob(f"{path.stem}-00001-of-*.gguf"))))
    return path
