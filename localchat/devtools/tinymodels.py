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


RERANK_TEMPLATE = ("<|im_start|>system\nJudge whether the Document meets the Query.<|im_end|>\n<|im_start|>user\n"
                   "<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n")


def write_tiny_model(path: Path, family: Family, *, n_ctx: int = 512, seed: int = 0,
                     chat_template: str | None = "family", extra: tuple[str, ...] = (), fim: bool = False,
                     pooling: int | None = None, split_tensors: int = 0, padding: int = 0, arch: str = "llama",
                     reranker: bool = False, control: tuple[str, ...] = ()) -> Path:
    """fim: the vocabulary has fill-in-the-middle tokens, declared in the GGUF as llama.cpp reads
    them; pooling: the GGUF declares this pooling type (1 mean, 2 cls, 3 last), as embedding models do;
    split_tensors: write a split GGUF (`NAME-00001-of-0000N.gguf`, …) of this many tensors a part,
    as gguf-split does; the first part's path is returned; padding: a metadata string of this many
    bytes (llama.cpp ignores it) makes the file that much larger; arch: llama or qwen3 (per-head
    Q/K norms); reranker: a Qwen3-Reranker-shaped model (qwen3, rank pooling, a yes/no classifier
    head `cls.output`, a `rerank` prompt template); control: more control tokens (those a chat
    template uses)."""
    if reranker:
        arch, pooling = "qwen3", 4
    tokens, types = vocabulary(family, (*extra, *(FIM.values() if fim else ())), control)
    index = {t: i for i, t in enumerate(tokens)}
    eos = family.eos_token if family.eos_token in index else family.stop_tokens[0]
    rng = np.random.default_rng(seed)

    w = GGUFWriter(str(path), arch, split_max_tensors=split_tensors)
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
    if reranker:
        w.add_array(f"{w.arch}.classifier.output_labels", ["yes", "no"])
        w.add_string("tokenizer.chat_template.rerank", RERANK_TEMPLATE)

    def tensor(name: str, *shape: int, scale: float = 0.1) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    n_vocab = len(tokens)
    tensor("token_embd.weight", n_vocab, N_EMBD, scale=1.0)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    tensor("output.weight", n_vocab, N_EMBD, scale=1.0)
    if reranker:
        tensor("cls.output.weight", 2, N_EMBD, scale=0.2)
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{name}.weight", N_EMBD, N_EMBD)
        if arch == "qwen3":
            for name in ("attn_q_norm", "attn_k_norm"):
                w.add_tensor(f"blk.{i}.{name}.weight", np.ones(N_EMBD // N_HEAD, dtype=np.float32))
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


def write_tiny_lora(path: Path, *, seed: int = 1, rank: int = 4, alpha: float = 4.0) -> Path:
    """A LoRA adapter for the tiny llama models (`general.type = adapter`): low-rank deltas to
    every block's attention and feed-forward input, large enough to move the logits visibly."""
    targets = {f"blk.{i}.{name}.weight": (N_EMBD, n_out) for i in range(N_LAYER)
               for name, n_out in (("attn_q", N_EMBD), ("attn_v", N_EMBD), ("attn_output", N_EMBD), ("ffn_up", N_FF))}
    return write_lora(path, "llama", targets, seed=seed, rank=rank, alpha=alpha, std=0.3)


def write_lora(path: Path, arch: str, targets: dict[str, tuple[int, int]], *, seed: int = 1, rank: int = 4,
               alpha: float = 4.0, std: float = 0.3) -> Path:
    """A LoRA GGUF as llama.cpp reads it: for each target weight (name: (n_in, n_out), llama.cpp's
    dimension order) random `.lora_a` [n_in, rank] and `.lora_b` [rank, n_out] (numpy: reversed)."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for name, (n_in, n_out) in targets.items():
        w.add_tensor(f"{name}.lora_a", (rng.standard_normal((rank, n_in)) * std).astype(np.float32))
        w.add_tensor(f"{name}.lora_b", (rng.standard_normal((n_out, rank)) * std).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


V_EMBD, V_FF, V_HEAD, V_LAYER, V_IMAGE, V_PATCH, V_MERGE = 32, 64, 2, 1, 112, 14, 2


def write_tiny_mmproj(path: Path, *, n_embd_text: int = N_EMBD, seed: int = 3) -> Path:
    """A vision projector llama.cpp's mtmd loads for the tiny models: Gemma 3's (a SigLIP encoder,
    average pooling, an RMS norm and a projection to the text model's width), 112-pixel images,
    14-pixel patches, pooled 2x2: 16 tokens an image. Its images are decoded non-causally."""
    rng = np.random.default_rng(seed)
    n_patches = (V_IMAGE // V_PATCH) ** 2
    w = GGUFWriter(str(path), "clip")
    w.add_string("general.type", "mmproj")
    w.add_string("clip.projector_type", "gemma3")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", V_IMAGE)
    w.add_uint32("clip.vision.patch_size", V_PATCH)
    w.add_uint32("clip.vision.embedding_length", V_EMBD)
    w.add_uint32("clip.vision.feed_forward_length", V_FF)
    w.add_uint32("clip.vision.block_count", V_LAYER)
    w.add_uint32("clip.vision.attention.head_count", V_HEAD)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.projector.scale_factor", V_MERGE)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def tensor(name: str, *shape: int, scale: float = 0.2) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    tensor("v.patch_embd.weight", V_EMBD, 3, V_PATCH, V_PATCH, scale=0.05)
    tensor("v.patch_embd.bias", V_EMBD)
    tensor("v.position_embd.weight", n_patches, V_EMBD)
    for i in range(V_LAYER):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensor(f"v.blk.{i}.{name}.weight", V_EMBD, V_EMBD)
            tensor(f"v.blk.{i}.{name}.bias", V_EMBD)
        for name in ("ln1", "ln2"):
            w.add_tensor(f"v.blk.{i}.{name}.weight", np.ones(V_EMBD, dtype=np.float32))
            w.add_tensor(f"v.blk.{i}.{name}.bias", np.zeros(V_EMBD, dtype=np.float32))
        tensor(f"v.blk.{i}.ffn_up.weight", V_FF, V_EMBD)
        tensor(f"v.blk.{i}.ffn_up.bias", V_FF)
        tensor(f"v.blk.{i}.ffn_down.weight", V_EMBD, V_FF)
        tensor(f"v.blk.{i}.ffn_down.bias", V_EMBD)
    w.add_tensor("v.post_ln.weight", np.ones(V_EMBD, dtype=np.float32))
    w.add_tensor("v.post_ln.bias", np.zeros(V_EMBD, dtype=np.float32))
    w.add_tensor("mm.soft_emb_norm.weight", np.ones(V_EMBD, dtype=np.float32))
    tensor("mm.input_projection.weight", V_EMBD, n_embd_text, scale=1.0)  # llama.cpp: [text width, vision width]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
