"""The request fields other servers have (issue 16): vLLM's continue_final_message and
add_generation_prompt, chat_template_kwargs, documents, echo and return_tokens_as_token_ids;
llama.cpp's top-level json_schema, response_format json_object with a schema, cache_prompt and
/infill's input_extra; and llama-server's /apply-template, which shows the prompt a request makes.

Tiny models have random weights: what the model writes is asserted only where a grammar forces
it; the prompt is asserted through /apply-template (the same rendering as a request's) and the
prompt's length in `usage`."""

from __future__ import annotations

import json
import re
import secrets

import httpx
import jsonschema
import openai
import pytest

from conftest import DEFAULT
from test_vision import png, uri

HI = [{"role": "user", "content": "Write about the sea."}]
PREFILL = HI + [{"role": "assistant", "content": "The sea is"}]
DOCS = [{"title": "Sea", "text": "Salty water."}, {"title": "Moon", "text": "Made of rock."}]


def prompt(http: httpx.Client, body: dict, model: str = "tiny-chatml") -> str:
    r = http.post("/apply-template", json={"model": model, **body})
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def chat(http: httpx.Client, body: dict, model: str = "tiny-chatml") -> dict:
    r = http.post("/v1/chat/completions", json={"model": model, "max_tokens": 1, **body})
    assert r.status_code == 200, r.text
    return r.json()


def refused(http: httpx.Client, path: str, body: dict) -> dict:
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    return r.json()["error"]


# -- the prompt's end: continue_final_message, add_generation_prompt ------------------------------------

@pytest.mark.parametrize("fields, end", [
    ({}, "<|im_start|>assistant\nThe sea is"),  # neither sent: a trailing assistant message is a prefill
    ({"continue_final_message": True, "add_generation_prompt": False}, "<|im_start|>assistant\nThe sea is"),
    ({"continue_final_message": True}, "<|im_start|>assistant\nThe sea is"),
    ({"add_generation_prompt": True}, "The sea is<|im_end|>\n<|im_start|>assistant\n"),  # vLLM: a new turn
    ({"continue_final_message": False}, "The sea is<|im_end|>\n<|im_start|>assistant\n"),
    ({"add_generation_prompt": False}, "The sea is<|im_end|>\n"),  # closed, nothing opened
])
def test_the_prompt_ends_as_the_fields_say(http: httpx.Client, fields: dict, end: str):
    text = prompt(http, {"messages": PREFILL, **fields})
    assert text.endswith(end) and text.count("The sea is") == 1


def test_the_prompts_end_reaches_the_model(http: httpx.Client):
    """The same rendering serves the request: a closed turn and a new one cost their tokens."""
    tokens = {name: chat(http, {"messages": messages, **fields})["usage"]["prompt_tokens"] for name, messages, fields in (
        ("prefill", PREFILL, {}), ("continued", PREFILL, {"continue_final_message": True}),
        ("new turn", PREFILL, {"add_generation_prompt": True}), ("closed", PREFILL, {"add_generation_prompt": False}),
        ("question", HI, {}), ("no prompt", HI, {"add_generation_prompt": False}))}
    assert tokens["prefill"] == tokens["continued"] < tokens["closed"] < tokens["new turn"]
    assert tokens["no prompt"] < tokens["question"] < tokens["prefill"]
    assert prompt(http, {"messages": HI}).endswith("about the sea.<|im_end|>\n<|im_start|>assistant\n")
    assert prompt(http, {"messages": HI, "add_generation_prompt": False}).endswith("about the sea.<|im_end|>\n")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/apply-template"])
def test_continuing_needs_the_assistants_last_message_and_no_new_turn(http: httpx.Client, path: str):
    both = refused(http, path, {"model": "tiny-chatml", "messages": PREFILL, "continue_final_message": True,
                                "add_generation_prompt": True})
    assert both["param"] == "continue_final_message" and "add_generation_prompt" in both["message"]
    assert both["message"].startswith("continue_final_message: ")
    last_user = refused(http, path, {"model": "tiny-chatml", "messages": HI, "continue_final_message": True})
    assert last_user["param"] == "continue_final_message" and "assistant" in last_user["message"]


def test_the_default_model_continues_the_given_text(http: httpx.Client):
    """SmolLM2 Instruct: the answer's first token is predicted from exactly where the prefill
    ends. Its log-probabilities equal those of the rendered prompt sent raw to /v1/completions
    (both decoded cold: cache_prompt false), and echo puts the prefill before the answer."""
    messages = [{"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "The capital of France is"}]
    rendered = prompt(http, {"messages": messages, "continue_final_message": True, "add_generation_prompt": False},
                      model=DEFAULT)
    assert rendered.endswith("<|im_start|>assistant\nThe capital of France is")
    common = {"model": DEFAULT, "max_tokens": 1, "logprobs": 5, "cache_prompt": False, "temperature": 0}
    raw = http.post("/v1/completions", json={**common, "prompt": rendered}).json()
    answer = chat(http, {**common, "messages": messages, "continue_final_message": True, "add_generation_prompt": False,
                         "logprobs": True, "top_logprobs": 5, "echo": True}, model=DEFAULT)
    assert answer["usage"]["prompt_tokens"] == raw["usage"]["prompt_tokens"]
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    top_chat = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    top_raw = raw["choices"][0]["logprobs"]["top_logprobs"][0]
    assert [t["token"] for t in top_chat] == list(top_raw)
    assert all(abs(t["logprob"] - top_raw[t["token"]]) < 1e-3 for t in top_chat)
    assert answer["choices"][0]["message"]["content"].startswith("The capital of France is")


# -- chat_template_kwargs --------------------------------------------------------------------------------

def test_chat_template_kwargs_reach_the_template(http: httpx.Client):
    plain = prompt(http, {"messages": HI}, model="tiny-kwargs")
    greeted = prompt(http, {"messages": HI, "chat_template_kwargs": {"greeting": "Ahoy, sailor"}}, model="tiny-kwargs")
    assert "Ahoy" not in plain and greeted.startswith("<|im_start|>system\nAhoy, sailor<|im_end|>\n")
    assert greeted.endswith(plain)
    asked = chat(http, {"messages": HI, "chat_template_kwargs": {"greeting": "Ahoy, sailor"}}, model="tiny-kwargs")
    assert asked["usage"]["prompt_tokens"] > chat(http, {"messages": HI}, model="tiny-kwargs")["usage"]["prompt_tokens"]


def test_enable_thinking_is_the_reasoning_switch(http: httpx.Client):
    """Qwen 3's switch: `enable_thinking: false` (or reasoning_effort "none") closes the think
    block in the prompt, and the answer is content, not reasoning."""
    on = prompt(http, {"messages": HI}, model="tiny-kwargs")
    off = prompt(http, {"messages": HI, "chat_template_kwargs": {"enable_thinking": False}}, model="tiny-kwargs")
    assert on.endswith("<|im_start|>assistant\n<think>\n") and off.endswith("<think>\n\n</think>\n\n")
    assert prompt(http, {"messages": HI, "reasoning_effort": "none"}, model="tiny-kwargs") == off
    assert prompt(http, {"messages": HI, "chat_template_kwargs": {"enable_thinking": True}}, model="tiny-kwargs") == on
    tags = [http.post("/tokenize", json={"model": "tiny-kwargs", "content": t}).json()["tokens"][-1]
            for t in ("<think>", "</think>")]
    ban = {str(t): -100 for t in tags}  # the model cannot open or close a think block itself
    body = {"messages": HI, "max_tokens": 3, "ignore_eos": True, "logit_bias": ban}
    thinking = chat(http, body, model="tiny-kwargs")["choices"][0]["message"]
    answering = chat(http, {**body, "chat_template_kwargs": {"enable_thinking": False}},
                     model="tiny-kwargs")["choices"][0]["message"]
    assert thinking.get("reasoning_content") and not thinking["content"]
    assert answering["content"] and "reasoning_content" not in answering


@pytest.mark.parametrize("fields, param", [
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs.add_generation_prompt"),
    ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking"),
    ({"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "none"},
     "chat_template_kwargs.enable_thinking"),
    ({"chat_template_kwargs": ["greeting"]}, "chat_template_kwargs"),
])
def test_bad_chat_template_kwargs_are_a_400_naming_them(http: httpx.Client, fields: dict, param: str):
    assert refused(http, "/v1/chat/completions", {"model": "tiny-kwargs", "messages": HI, **fields})["param"] == param


# -- documents -------------------------------------------------------------------------------------------

def test_documents_go_to_a_template_that_takes_them(http: httpx.Client):
    text = prompt(http, {"messages": HI, "documents": DOCS}, model="tiny-kwargs")
    assert text.startswith("<|im_start|>system\nDOCS: [Sea] Salty water. [Moon] Made of rock.<|im_end|>\n")


def test_documents_go_into_the_system_prompt_otherwise(http: httpx.Client):
    listing = ("Use the following documents to answer.\n\n[Document 1]\ntitle: Sea\ntext: Salty water.\n\n"
               "[Document 2]\ntitle: Moon\ntext: Made of rock.")
    assert prompt(http, {"messages": HI, "documents": DOCS}).startswith(f"<|im_start|>system\n{listing}<|im_end|>\n")
    system = [{"role": "system", "content": "Be brief."}, *HI]
    assert prompt(http, {"messages": system, "documents": DOCS}).startswith(
        f"<|im_start|>system\nBe brief.\n\n{listing}<|im_end|>\n<|im_start|>user\n")
    with_docs = chat(http, {"messages": HI, "documents": DOCS})["usage"]["prompt_tokens"]
    assert with_docs > chat(http, {"messages": HI})["usage"]["prompt_tokens"]
    assert refused(http, "/v1/chat/completions", {"model": "tiny-chatml", "messages": HI,
                                                  "documents": [{"title": 1}]})["param"] == "documents.0.title"


# -- echo, return_tokens_as_token_ids -------------------------------------------------------------------

def test_echo_puts_the_last_assistant_message_before_the_answer(client: openai.OpenAI):
    grammar = 'root ::= " deep."'  # what the tiny model writes is the grammar's doing
    extra = {"continue_final_message": True, "echo": True, "grammar": grammar}
    r = client.chat.completions.create(model="tiny-chatml", messages=PREFILL, max_tokens=20, extra_body=extra)
    assert r.choices[0].message.content == "The sea is deep."
    pieces = [c.choices[0].delta.content for c in client.chat.completions.create(
        model="tiny-chatml", messages=PREFILL, max_tokens=20, stream=True, extra_body=extra) if c.choices]
    assert [p for p in pieces if p][0] == "The sea is" and "".join(p or "" for p in pieces) == "The sea is deep."
    # the last message is the user's: nothing to echo
    r = client.chat.completions.create(model="tiny-chatml", messages=HI, max_tokens=20, extra_body=extra | {
        "continue_final_message": False})
    assert r.choices[0].message.content == " deep."


def test_return_tokens_as_token_ids(http: httpx.Client):
    body = {"messages": HI, "max_tokens": 3, "ignore_eos": True, "logprobs": True, "top_logprobs": 2, "seed": 1}
    named = chat(http, body)["choices"][0]["logprobs"]["content"]
    ids = chat(http, {**body, "return_tokens_as_token_ids": True})["choices"][0]["logprobs"]["content"]
    assert len(ids) == 3 and all(re.fullmatch(r"token_id:\d+", t["token"]) for t in ids)
    assert all(re.fullmatch(r"token_id:\d+", x["token"]) for t in ids for x in t["top_logprobs"])
    for by_id, by_text in zip(ids, named):  # the same tokens: each id decodes to the token's text
        token = int(by_id["token"].split(":")[1])
        text = http.post("/detokenize", json={"model": "tiny-chatml", "tokens": [token]}).json()["content"]
        assert text == by_text["token"] and by_id["bytes"] == by_text["bytes"]
    legacy = http.post("/v1/completions", json={"model": "tiny-chatml", "prompt": "The sea", "max_tokens": 2,
                                                "ignore_eos": True, "logprobs": 2, "return_tokens_as_token_ids": True})
    lp = legacy.json()["choices"][0]["logprobs"]
    assert all(re.fullmatch(r"token_id:\d+", t) for t in lp["tokens"] + [k for top in lp["top_logprobs"] for k in top])


# -- JSON output: top-level json_schema, response_format json_object with a schema ------------------------

CHOICE = {"type": "object", "properties": {"a": {"enum": [1, 2]}}, "required": ["a"], "additionalProperties": False}
UNSATISFIABLE = {"type": "object", "properties": {"a": False}, "required": ["a"]}


@pytest.mark.parametrize("fields", [
    {"json_schema": CHOICE},
    {"response_format": {"type": "json_object", "schema": CHOICE}},
    {"json_schema": CHOICE, "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": CHOICE}}},
])
def test_a_schema_in_llama_cpps_places_shapes_the_answer(http: httpx.Client, fields: dict):
    answer = chat(http, {"messages": HI, "max_tokens": 200, "seed": 3, **fields})["choices"][0]
    assert answer["finish_reason"] == "stop"
    jsonschema.validate(json.loads(answer["message"]["content"]), CHOICE)


def test_top_level_json_schema_on_completions(http: httpx.Client):
    r = http.post("/v1/completions", json={"model": "tiny-chatml", "prompt": "JSON:", "max_tokens": 200, "seed": 3,
                                           "json_schema": CHOICE})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), CHOICE)
    error = refused(http, "/v1/completions", {"model": "tiny-chatml", "prompt": "x", "json_schema": UNSATISFIABLE})
    assert error["param"] == "json_schema"


@pytest.mark.parametrize("fields, param", [
    ({"json_schema": UNSATISFIABLE}, "json_schema"),
    ({"response_format": {"type": "json_object", "schema": UNSATISFIABLE}}, "response_format.schema"),
    ({"json_schema": {"type": 123}}, "json_schema"),
    ({"json_schema": CHOICE, "response_format": {"type": "json_object", "schema": {"type": "array"}}}, "json_schema"),
    ({"json_schema": CHOICE, "grammar": 'root ::= "a"'}, "grammar"),  # (one rule for every endpoint: constraints.check)
])
def test_a_bad_schema_names_the_field_it_came_in(http: httpx.Client, fields: dict, param: str):
    error = refused(http, "/v1/chat/completions", {"model": "tiny-chatml", "messages": HI, **fields})
    assert error["param"] == param and error["message"].startswith(f"{param}: ")


# -- cache_prompt ----------------------------------------------------------------------------------------

def test_cache_prompt_false_neither_reads_nor_keeps_the_cache(http: httpx.Client):
    text = f"{secrets.token_hex(4)} " + "the sea is wide and the wind is cold " * 8

    def cached(cache_prompt: bool = True) -> int:
        r = http.post("/v1/completions", json={"model": "tiny-chatml", "prompt": text, "max_tokens": 1,
                                               "cache_prompt": cache_prompt})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    assert cached(False) == 0 and cached(False) == 0
    assert cached() <= 1  # the two before left nothing (a BOS token at most is shared with any prompt)
    assert cached() > 50  # a prompt sent again with the default is read from the cache …
    assert cached(False) == 0  # … but not by a request with cache_prompt false
    body = {"messages": [{"role": "user", "content": text}], "cache_prompt": False}
    assert [chat(http, body)["usage"]["prompt_tokens_details"]["cached_tokens"] for _ in range(2)] == [0, 0]


def test_cache_prompt_false_on_infill(http: httpx.Client):
    body = {"model": "tiny-coder", "input_prefix": f"# {secrets.token_hex(4)}\ndef f(x):\n    return",
            "input_suffix": "\n\nprint(f(2))\n", "n_predict": 1, "cache_prompt": False}
    assert [http.post("/infill", json=body).json()["tokens_cached"] for _ in range(2)] == [0, 0]


# -- /infill's input_extra -------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, param", [
    ([{}], "input_extra.0.text"),
    ([{"filename": "ok"}], "input_extra.0.text"),
    ([{"filename": "a.py", "text": "x = 1"}, {"filename": "b.py", "text": 5}], "input_extra.1.text"),
    ([{"filename": None, "text": "x = 1"}], "input_extra.0.filename"),
    (["x = 1"], "input_extra.0"),
])
def test_an_input_extra_chunk_without_text_is_a_400(http: httpx.Client, extra: list, param: str):
    error = refused(http, "/infill", {"model": "tiny-coder", "input_prefix": "def f(", "input_extra": extra,
                                      "n_predict": 1})
    assert error["param"] == param
    ok = http.post("/infill", json={"model": "tiny-coder", "input_prefix": "def f(", "n_predict": 1,
                                    "input_extra": [{"filename": "a.py", "text": "x = 1"}, {"text": "y = 2"}]})
    assert ok.status_code == 200, ok.text


# -- prompt_logprobs -------------------------------------------------------------------------------------

def test_prompt_logprobs_are_each_prompt_tokens_given_the_ones_before(http: httpx.Client):
    """vLLM's shape; the last prompt token's entry equals the log-probability the model gives that
    token when it generates it after the rest of the prompt (forced by a bias: logprobs are raw)."""
    text = "the sea is wide and the wind is cold"
    body = {"model": "tiny-chatml", "max_tokens": 1, "prompt_logprobs": 2, "cache_prompt": False}
    whole = http.post("/v1/completions", json={**body, "prompt": text}).json()
    entries, n = whole["choices"][0]["prompt_logprobs"], whole["usage"]["prompt_tokens"]
    tokens = http.post("/tokenize", json={"model": "tiny-chatml", "content": text, "add_special": True}).json()["tokens"]
    plain = http.post("/tokenize", json={"model": "tiny-chatml", "content": text}).json()["tokens"]
    head = http.post("/detokenize", json={"model": "tiny-chatml", "tokens": plain[:-1]}).json()["content"].lstrip(" ")
    assert len(entries) == n == len(tokens) and entries[0] is None
    for token, entry in zip(tokens[1:], entries[1:]):
        assert entry[str(token)]["rank"] >= 1 and entry[str(token)]["logprob"] <= 0
        assert sorted(e["rank"] for k, e in entry.items() if k != str(token) or e["rank"] <= 2)[:2] == [1, 2]
    assert whole["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    last = tokens[-1]
    forced = http.post("/v1/completions", json={"model": "tiny-chatml", "prompt": head, "max_tokens": 1, "logprobs": 0,
                                                "logit_bias": {str(last): 100}, "cache_prompt": False}).json()
    assert forced["usage"]["prompt_tokens"] == n - 1
    said = forced["choices"][0]["logprobs"]
    assert said["tokens"][0] == entries[-1][str(last)]["decoded_token"]
    assert abs(said["token_logprobs"][0] - entries[-1][str(last)]["logprob"]) < 1e-2


def test_prompt_logprobs_on_chat_and_where_they_are_refused(http: httpx.Client):
    answer = chat(http, {"messages": HI, "prompt_logprobs": 0})
    assert len(answer["prompt_logprobs"]) == answer["usage"]["prompt_tokens"]
    assert all(len(e) == 1 for e in answer["prompt_logprobs"][1:])  # the token itself, no alternatives
    assert "prompt_logprobs" not in chat(http, {"messages": HI})
    for path, body in (("/v1/chat/completions", {"messages": HI, "stream": True}),
                       ("/v1/completions", {"prompt": "x", "stream": True})):
        assert refused(http, path, {"model": "tiny-chatml", "prompt_logprobs": 1, **body})["param"] == "prompt_logprobs"
    image = {"type": "image_url", "image_url": {"url": uri(png(40))}}
    error = refused(http, "/v1/chat/completions", {"model": "tiny-vision", "prompt_logprobs": 1, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, image]}]})
    assert error["param"] == "prompt_logprobs"
