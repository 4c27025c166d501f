"""Logit bias and repetition penalties are applied in numpy, to the tokens they touch (llama.cpp's
penalties sampler looks up every candidate): they must give llama.cpp's own numbers, bit for bit."""

from __future__ import annotations

import ctypes
import random

import llama_cpp as C
import numpy as np
import pytest

from localchat.engine.params import SamplingParams
from localchat.engine.sampling.sampling import Adjustments

N_VOCAB = 5000
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def llama_adjusted(params: SamplingParams, accepted: list[int], logits: np.ndarray) -> np.ndarray:
    """What llama.cpp's logit-bias and penalties samplers make of `logits` after `accepted`."""
    chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
    try:
        if params.logit_bias:
            biases = (C.llama_logit_bias * len(params.logit_bias))(
                *(C.llama_logit_bias(t, b) for t, b in params.logit_bias.items()))
            C.llama_sampler_chain_add(chain, C.llama_sampler_init_logit_bias(N_VOCAB, len(params.logit_bias), biases))
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_penalties(
            N_VOCAB, params.penalty_last_n, params.repeat_penalty, params.frequency_penalty, params.presence_penalty))
        for token in accepted:
            C.llama_sampler_accept(chain, token)
        buf = np.zeros(N_VOCAB, dtype=TOKEN_DATA)
        buf["id"], buf["logit"] = np.arange(N_VOCAB), logits
        cur = C.llama_token_data_array(buf.ctypes.data_as(C.llama_token_data_p), N_VOCAB, -1, False)
        C.llama_sampler_apply(chain, ctypes.byref(cur))
        assert cur.size == N_VOCAB and buf.ctypes.data == ctypes.addressof(cur.data.contents)
        return buf["logit"].copy()
    finally:
        C.llama_sampler_free(chain)


@pytest.mark.parametrize("seed", range(12))
def test_adjustments_match_llama_cpp_bit_for_bit(seed: int):
    rng = random.Random(seed)
    params = SamplingParams(
        repeat_penalty=rng.choice([1.0, 1.1, 1.3, 0.8, 2.5]),
        frequency_penalty=rng.choice([0.0, 0.25, -0.7, 1.5]),
        presence_penalty=rng.choice([0.0, 0.5, -1.2]),
        penalty_last_n=rng.choice([0, 1, 8, 64]),
        logit_bias={rng.randrange(N_VOCAB): rng.choice([-100.0, -3.5, 0.25, 7.0, float("-inf")])
                    for _ in range(rng.choice([0, 1, 5]))})
    logits = np.random.default_rng(seed).normal(0, 4, N_VOCAB).astype(np.float32)
    pool = [rng.randrange(N_VOCAB) for _ in range(30)] + list(params.logit_bias) + [0, 1, 2]
    ours = Adjustments(params)
    accepted: list[int] = []
    for _ in range(150):
        token = rng.choice(pool)
        ours.accept(token)
        accepted.append(token)
        if len(accepted) % 10 == 0:
            np.testing.assert_array_equal(ours.apply(logits), llama_adjusted(params, accepted, logits))


def test_penalty_last_n_minus_one_covers_every_sampled_token():
    """-1 means the whole context, as in llama-server and Ollama (llama.cpp's sampler would
    read it as 0: no penalty)."""
    everything, last_two = Adjustments(SamplingParams(repeat_penalty=2.0, penalty_last_n=-1)), \
        Adjustments(SamplingParams(repeat_penalty=2.0, penalty_last_n=2))
    logits = np.full(10, 4.0, dtype=np.float32)
    for token in (1, 2, 3, 4):
        everything.accept(token)
        last_two.accept(token)
    assert everything.apply(logits)[1:5].tolist() == [2.0] * 4
    assert last_two.apply(logits)[1:5].tolist() == [4.0, 4.0, 2.0, 2.0]


def test_nothing_to_adjust_returns_the_logits_themselves():
    logits = np.zeros(10, dtype=np.float32)
    adjust = Adjustments(SamplingParams(repeat_penalty=1.0))
    adjust.accept(3)
    assert adjust.apply(logits) is logits


def test_the_prompt_counts_toward_the_penalties():
    """As llama-server's sampler, which accepts every prompt token before the first pick: the
    prompt's last penalty_last_n tokens are penalized as if sampled."""
    logits = np.full(10, 4.0, dtype=np.float32)
    adjust = Adjustments(SamplingParams(repeat_penalty=2.0, penalty_last_n=2), prompt=[1, 2, 3])
    assert adjust.apply(logits)[1:4].tolist() == [4.0, 2.0, 2.0]  # the last two of the prompt
    adjust.accept(5)
    assert adjust.apply(logits)[1:6].tolist() == [4.0, 4.0, 2.0, 4.0, 2.0]
    everything = Adjustments(SamplingParams(repeat_penalty=2.0, penalty_last_n=-1), prompt=[1, 2, 3])
    assert everything.apply(logits)[1:4].tolist() == [2.0] * 3
    off = Adjustments(SamplingParams(repeat_penalty=1.0), prompt=[1, 2, 3])
    assert off.apply(logits) is logits
