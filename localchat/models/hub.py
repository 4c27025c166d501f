"""What `localchat pull` is asked for, and which files of a Hugging Face repository it takes.

A source is `OWNER/REPO[:QUANT]`, `hf.co/OWNER/REPO[:QUANT]` (as Ollama takes it), a huggingface.co
URL (of the repository, or of one file: `…/resolve/main/x.gguf`, `…/blob/main/x.gguf`), or the
https URL of a GGUF file anywhere else. The files are chosen as llama.cpp's `-hf REPO:QUANT` does
(common/download.cpp): the first GGUF whose path has `QUANT` followed by `.` or `-` (case
ignored; default Q4_K_M, then Q8_0, then the first GGUF), never an mmproj/imatrix/draft file,
every part of a split model, and the mmproj file nearest to it (same folder or above, closest in
bits)."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import InvalidRequest, PullNotFound
from .gguf import SPLIT

DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
NOT_A_MODEL = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")  # companion files, as llama.cpp skips them
HUB_HOSTS = {"huggingface.co", "www.huggingface.co", "hf.co"}
REPO = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
QUANT = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Source:
    repo: str | None = None  # OWNER/NAME on the hub
    quant: str | None = None  # the tag asked for (None: the default order)
    file: str | None = None  # one file of the repository, named by a URL
    revision: str | None = None
    url: str | None = None  # a GGUF file elsewhere

    def __str__(self) -> str:
        if self.url:
            return self.url
        where = f"hf.co/{self.repo}"
        return f"{where}/resolve/{self.revision or 'main'}/{self.file}" if self.file else \
            f"{where}:{self.quant}" if self.quant else where


def parse_source(text: str) -> Source:
    text = text.strip()
    if re.match(r"^(hf\.co|(www\.)?huggingface\.co)/", text, re.IGNORECASE):
        text = "https://" + text
    if re.match(r"^https?://", text, re.IGNORECASE):
        return _from_url(text)
    repo, _, quant = text.partition(":")
    if REPO.match(repo) and (not quant or QUANT.match(quant)):
        return Source(repo=repo, quant=_quant(quant))
    raise InvalidRequest(f"{text!r} is not something to pull: give OWNER/REPO[:QUANT] (a Hugging Face repository, "
                         "e.g. bartowski/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M), hf.co/OWNER/REPO[:QUANT], a "
                         "huggingface.co URL, or the https URL of a .gguf file", param="model")


def _quant(tag: str) -> str | None:
    return None if not tag or tag.lower() == "latest" else tag


def _hub_hosts() -> set[str]:
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT", "")).netloc.lower()
    return HUB_HOSTS | ({endpoint} if endpoint else set())


def _from_url(url: str) -> Source:
    parts = urlsplit(url)
    host = parts.netloc.lower()
    segments = [s for s in parts.path.split("/") if s]
    if host in _hub_hosts():
        if len(segments) == 2:
            name, _, quant = segments[1].partition(":")
            if REPO.match(f"{segments[0]}/{name}") and (not quant or QUANT.match(quant)):
                return Source(repo=f"{segments[0]}/{name}", quant=_quant(quant))
        if len(segments) >= 5 and segments[2] in ("resolve", "blob") and segments[-1].lower().endswith(".gguf"):
            return Source(repo="/".join(segments[:2]), revision=segments[3], file="/".join(segments[4:]))
        raise InvalidRequest(f"{url!r} is neither a repository nor a .gguf file on {host}: give "
                             f"https://{host}/OWNER/REPO[:QUANT] or a …/resolve/main/FILE.gguf URL", param="model")
    if not parts.path.lower().endswith(".gguf") or ".." in segments:
        raise InvalidRequest(f"{url!r} is not the URL of a .gguf file", param="model")
    if parts.scheme.lower() != "https" and not _loopback(parts.hostname or ""):
        raise InvalidRequest(f"{url!r}: only https URLs are pulled (http only from this machine)", param="model")
    return Source(url=url)


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- choosing the files -------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    files: tuple[str, ...]  # the model: one file, or every part of a split one (first part first)
    mmproj: str | None
    quant: str  # the tag of the chosen file ("" if its name has none)


def is_model(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.lower().endswith(".gguf") and not any(k in name for k in NOT_A_MODEL)


def split_of(path: str) -> tuple[str, int, int]:
    """(prefix, part number, parts) of a GGUF path; (prefix, 1, 1) for one file."""
    m = SPLIT.match(path)
    if m:
        return m["prefix"], int(m["no"]), int(m["count"])
    return path[:-5] if path.lower().endswith(".gguf") else path, 1, 1


def tag_of(path: str) -> str:
    """The quantization a file's name carries: `…-Q4_K_M.gguf` → Q4_K_M, `…-f16-00001-of-00002.gguf` → F16."""
    m = TAG.search(split_of(path)[0])
    return m[1].upper() if m else ""


def plan(repo: str, files: list[str], source: Source) -> Plan:
    """The files to fetch from a repository whose files are `files` (in the hub's order)."""
    ggufs = [f for f in files if f.lower().endswith(".gguf")]
    if source.file:
        primary = next((f for f in files if f.lower() == source.file.lower()), None)
        if primary is None:
            raise PullNotFound(f"{repo} has no file {source.file}; its GGUF files: {', '.join(ggufs) or 'none'}")
    else:
        primary = _best(ggufs, source.quant)
        if primary is None:
            models = sorted({tag_of(f) or f for f in ggufs if is_model(f)})
            if not models:
                raise PullNotFound(f"{repo} has no GGUF model file (localchat runs GGUF models: look for a "
                                   "repository whose name ends in -GGUF)")
            raise PullNotFound(f"{repo} has no {source.quant} file; its quantizations: {', '.join(models)}. "
                               f"Pull one of them: localchat pull {repo}:{models[0]}")
    prefix, _, count = split_of(primary)
    parts = [f for f in ggufs if split_of(f)[0] == prefix and split_of(f)[2] == count] if count > 1 else [primary]
    parts.sort(key=lambda f: split_of(f)[1])
    if len(parts) != count:
        raise PullNotFound(f"{repo}: {primary} is part 1 of {count}, but the repository has {len(parts)} of them")
    return Plan(tuple(parts), _mmproj(ggufs, primary), tag_of(primary))


def _best(ggufs: list[str], quant: str | None) -> str | None:
    for tag in (quant,) if quant else DEFAULT_QUANTS:
        pattern = re.compile(re.escape(tag) + "[.-]", re.IGNORECASE)
        for f in ggufs:
            if is_model(f) and pattern.search(f) and split_of(f)[1] == 1:
                return f
    if quant:
        return None
    return next((f for f in ggufs if is_model(f) and split_of(f)[1] == 1), None)


def _bits(tag: str) -> int:
    m = re.search(r"\d+", tag)
    return int(m[0]) if m else 0


def _mmproj(ggufs: list[str], model: str) -> str | None:
    """The mmproj file in the model's folder or one above it, the deepest first, then the
    closest in bits to the model's quantization (llama.cpp's find_best_sibling)."""
    folder = model.split("/")[:-1]
    best, best_key = None, None
    for f in ggufs:
        if "mmproj" not in f:
            continue
        where = f.split("/")[:-1]
        if folder[:len(where)] != where:
            continue
        key = (-len(where), abs(_bits(tag_of(f)) - _bits(tag_of(model))))
        if best_key is None or key < best_key:
            best, best_key = f, key
    return best


def short_name(source: Source) -> str:
    """A registry name from the repository (or the file): lowercase, without the -GGUF suffix."""
    if source.repo and not source.file:
        base = source.repo.split("/")[1]
    else:
        base = (source.file or urlsplit(source.url or "").path).rsplit("/", 1)[-1]
        base = split_of(base)[0]
    base = re.sub(r"[-_.]gguf$", "", base, flags=re.IGNORECASE)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.").lower()[:64]
    return name or "model"
