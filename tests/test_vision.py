"""Images through llama.cpp's mtmd: a tiny Gemma-style model with a tiny Gemma 3 projector
(tinymodels.write_tiny_mmproj: 16 tokens an image, decoded non-causally), on /v1/chat/completions
with OpenAI `image_url` parts (data: URIs), served by a worker process."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import openai
import pytest
from PIL import Image

from localchat.devtools.tinymodels import V_IMAGE, V_MERGE, V_PATCH

IMAGE_TOKENS = (V_IMAGE // V_PATCH // V_MERGE) ** 2  # what the projector makes of any image
WRAPPERS = 2  # <start_of_image> and <end_of_image>, which mtmd adds around it


def png(seed: int, size: tuple[int, int] = (40, 30), fmt: str = "PNG") -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt)
    return out.getvalue()


def uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def ask(text: str, *images: str, model: str = "tiny-vision", **extra) -> dict:
    parts = [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": u}} for u in images)]
    return {"model": model, "messages": [{"role": "user", "content": parts}], "max_tokens": 4, "temperature": 0,
            "ignore_eos": True, "logprobs": True, "top_logprobs": 3, **extra}


def post(http: httpx.Client, body: dict) -> dict:
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def logprobs(answer: dict) -> list:
    return [(t["token"], t["logprob"]) for t in answer["choices"][0]["logprobs"]["content"]]


def test_an_image_changes_the_prompt_and_the_output(http: httpx.Client):
    plain = post(http, ask("What is in the picture?"))
    seen = post(http, ask("What is in the picture?", uri(png(1))))
    other = post(http, ask("What is in the picture?", uri(png(2))))
    assert seen["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] + IMAGE_TOKENS + WRAPPERS
    assert other["usage"]["prompt_tokens"] == seen["usage"]["prompt_tokens"]  # any image: the projector's size
    assert logprobs(seen) != logprobs(plain)
    assert logprobs(seen) != logprobs(other)  # the pixels matter, not just the image's place


def test_a_repeated_image_is_read_from_the_prompt_cache(http: httpx.Client):
    image = uri(png(3, (64, 48), "JPEG"), "image/jpeg")
    first = post(http, ask("Describe it.", image, max_tokens=2))
    again = post(http, ask("Describe it.", image, max_tokens=2))
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < IMAGE_TOKENS
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] - 1
    # the next turn of the chat: the image, earlier in the conversation, is not decoded again
    turn = ask("Describe it.", image)
    turn["messages"] += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                         {"role": "user", "content": "And its colours?"}]
    follow = post(http, turn)
    assert follow["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] - 1
    # another image in the same place is not a cache hit past the text before it
    other = post(http, ask("Describe it.", uri(png(4, (64, 48)))))
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] < first["usage"]["prompt_tokens"] - IMAGE_TOKENS


def test_images_stream_and_agree_with_the_answer_in_one_piece(server, client: openai.OpenAI, http: httpx.Client):
    body = ask("Two images:", uri(png(5)), uri(png(6)))
    whole = post(http, body)
    assert whole["usage"]["prompt_tokens"] == post(http, ask("Two images:"))["usage"]["prompt_tokens"] + 2 * (
        IMAGE_TOKENS + WRAPPERS)
    extra = {"ignore_eos": body.pop("ignore_eos")}
    chunks = client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True},
                                            extra_body=extra)
    text, usage = "", None
    for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == whole["choices"][0]["message"]["content"]
    assert usage is not None and usage.prompt_tokens == whole["usage"]["prompt_tokens"]


@pytest.mark.parametrize("url, param, words", [
    (uri(b"hello, not an image"), "messages.0.content.1", "not an image"),
    (uri(png(7)[:40]), "messages.0.content.1", "not an image"),  # a truncated PNG
    ("data:image/png;base64,@@@", "messages.0.content.1.image_url.url", "base64"),
    ("https://example.com/cat.png", "messages.0.content.1.image_url.url", "not fetched"),  # fetch_images is off
    ("file:///etc/passwd", "messages.0.content.1.image_url.url", "media folder"),  # there is no media_folder
    ("ftp://example.com/cat.png", "messages.0.content.1.image_url.url", "ftp URLs are not read"),
])
def test_a_bad_image_is_a_400_naming_the_part(http: httpx.Client, url: str, param: str, words: str):
    r = http.post("/v1/chat/completions", json=ask("Look:", url))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"]


def test_a_model_without_a_projector_refuses_images(http: httpx.Client):
    r = http.post("/v1/chat/completions", json=ask("Look:", uri(png(8)), model="tiny-gemma"))
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "messages.0.content.1" and "mmproj" in r.json()["error"]["message"]


def test_too_many_images_and_other_parts(http: httpx.Client):
    r = http.post("/v1/chat/completions", json=ask("Look:", *[uri(png(9))] * 17))
    assert r.status_code == 400 and "max_media" in r.json()["error"]["message"]
    body = ask("Look:")
    body["messages"][0]["content"].append({"type": "file", "file": {"file_id": "x"}})
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.0.content.1"  # the part refused


def test_the_images_tokens_count_against_the_context(server):
    """The server counts the text (it fits in 64 tokens); the worker adds the image's 18: a 400
    before the first byte, streamed or not."""
    text = "a " * 35
    alone = post(httpx.Client(base_url=server.url, timeout=60), ask(text, model="tiny-vision-small"))
    assert 64 - IMAGE_TOKENS - WRAPPERS < alone["usage"]["prompt_tokens"] < 60
    for stream in (False, True):
        with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=60,
                          json=ask(text, uri(png(10)), model="tiny-vision-small", stream=stream)) as r:
            r.read()
            assert r.status_code == 400, r.text
            assert json.loads(r.text)["error"]["code"] == "context_length_exceeded"


def test_vision_is_a_listed_capability(http: httpx.Client):
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    assert cards["tiny-vision"]["capabilities"] == ["completion", "tools", "vision"]
    assert cards["tiny-gemma"]["capabilities"] == ["completion", "tools"]
    assert http.get("/props", params={"model": "tiny-vision"}).json()["modalities"] == {"vision": True, "audio": False}
    assert http.get("/props", params={"model": "tiny-gemma"}).json()["modalities"]["vision"] is False
    show = http.post("/api/show", json={"model": "tiny-vision"}).json()
    assert "vision" in show["capabilities"]
    assert "vision" not in http.post("/api/show", json={"model": "tiny-gemma"}).json()["capabilities"]


def test_audio_needs_a_projector_that_reads_audio(http: httpx.Client):
    wav = base64.b64encode(b"RIFF....WAVEfmt ").decode()
    for fmt, words in (("wav", "does not read audio"), ("ogg", "audio format")):
        body = ask("Listen:")
        body["messages"][0]["content"].append({"type": "input_audio", "input_audio": {"data": wav, "format": fmt}})
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages.0.content.1"
        assert words in r.json()["error"]["message"]


def test_n_choices_share_one_decoded_image(http: httpx.Client):
    body = ask("Describe it.", uri(png(11)), n=2, temperature=1.0, seed=5)
    answer = post(http, body)
    assert len(answer["choices"]) == 2
    assert answer["usage"]["prompt_tokens"] == post(http, ask("Describe it."))["usage"]["prompt_tokens"] + (
        IMAGE_TOKENS + WRAPPERS)
    assert answer["usage"]["completion_tokens"] == 8


def test_image_limits_name_the_part():
    """Pillow reads only the header before the size checks (no server needed)."""
    from localchat.errors import InvalidRequest
    from localchat.generation.media import decode_image
    from localchat.models import Settings

    image = png(12, (40, 30))
    media = decode_image(image, "messages.0.content.1", Settings())
    assert (media.width, media.height, len(media.data)) == (40, 30, 40 * 30 * 3)
    assert decode_image(image, "p", Settings()).id == media.id != decode_image(png(13), "p", Settings()).id
    for limits, words in ((Settings(max_image_pixels=40 * 30 - 1), "max_image_pixels"),
                          (Settings(max_media_bytes=1024), "max_media_bytes")):
        big = image if words == "max_image_pixels" else png(14, (200, 200))
        with pytest.raises(InvalidRequest) as info:
            decode_image(big, "messages.0.content.1", limits)
        assert info.value.param == "messages.0.content.1" and words in info.value.message


def test_an_image_on_every_protocol(http: httpx.Client):
    """Anthropic's base64 image blocks, Responses' input_image parts and Ollama's images reach the
    same projector: the prompt grows by the image's tokens, and a repeat is read from the cache."""
    image = png(7)
    b64 = base64.b64encode(image).decode()

    def anthropic(with_image: bool) -> dict:
        content = [{"type": "text", "text": "What is it?"}]
        if with_image:
            content.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}})
        r = http.post("/v1/messages", json={"model": "tiny-vision", "max_tokens": 2, "temperature": 0,
                                            "messages": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        return {"prompt": u["input_tokens"] + u["cache_read_input_tokens"], "cached": u["cache_read_input_tokens"]}

    def responses(with_image: bool) -> dict:
        content = [{"type": "input_text", "text": "What is it?"}]
        if with_image:
            content.append({"type": "input_image", "image_url": uri(image)})
        r = http.post("/v1/responses", json={"model": "tiny-vision", "max_output_tokens": 2, "temperature": 0,
                                             "input": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        return {"prompt": u["input_tokens"], "cached": u["input_tokens_details"]["cached_tokens"]}

    def ollama(with_image: bool) -> dict:
        message = {"role": "user", "content": "What is it?", **({"images": [b64]} if with_image else {})}
        r = http.post("/api/chat", json={"model": "tiny-vision", "stream": False, "messages": [message],
                                         "options": {"num_predict": 2, "temperature": 0}})
        assert r.status_code == 200, r.text
        return {"prompt": r.json()["prompt_eval_count"], "cached": None}

    for protocol in (anthropic, responses, ollama):
        plain, seen, again = protocol(False), protocol(True), protocol(True)
        assert seen["prompt"] == plain["prompt"] + IMAGE_TOKENS + WRAPPERS, protocol.__name__
        if again["cached"] is not None:
            assert again["cached"] == again["prompt"] - 1, protocol.__name__
    r = http.post("/v1/messages", json={"model": "tiny-chatml", "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}]}]})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("messages.0.content.0: ")
