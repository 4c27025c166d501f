"""`localchat pull`: a model from Hugging Face (or a GGUF file at a URL) onto this machine, checked,
then recorded in the user's registry under a short name.

Hub files go through huggingface_hub into the user's Hugging Face cache (HF_HOME, HF_HUB_CACHE;
HF_TOKEN or `hf auth login` for gated repositories; HF_ENDPOINT for a mirror). Downloads go over
plain HTTP (HF_HUB_DISABLE_XET=1 unless set otherwise), so an interrupted one resumes where it
stopped: within a pull when the connection drops, and at the next pull after Ctrl-C (the partial
file stays in the cache as `<blob>.incomplete`). Nothing is registered until every file is there
and checked: its sha256 (the hub's ETag of a large file), its GGUF header, every part of a split
model. A split model stays split, as the hub has it: llama.cpp loads the parts from the first."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..errors import InvalidRequest, LocalchatError, ModelUnavailable, PullDenied, PullFailed, PullNotFound
from . import paths, user
from .catalog import Registry
from .gguf import NotGGUF, inspect, read_metadata
from .hub import Source, parse_source, plan, short_name

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")  # read when huggingface_hub is first imported (below, lazily)
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
RETRIES = 3  # a file whose connection drops is resumed this many times within one pull


class Progress(Protocol):
    """Where a pull reports: the CLI's progress bars, /api/pull's NDJSON lines."""

    def status(self, text: str) -> None: ...

    def start(self, file: str, total: int | None, done: int) -> None: ...

    def advance(self, file: str, n: int) -> None: ...  # may raise to cancel (the API's client left)


@dataclass(frozen=True)
class Pulled:
    name: str
    path: Path  # the model's (first) file
    files: tuple[Path, ...]
    mmproj: Path | None
    source: str
    size: int


def pull(text: str, *, name: str | None = None, progress: Progress, base: Path | None = None) -> Pulled:
    """Fetch what `text` names, check it, record it. Raises a LocalchatError (PullFailed and its
    kinds, InvalidRequest for a bad source or name) with nothing registered."""
    source = parse_source(text)
    progress.status("pulling manifest")
    if source.url:
        chosen, canonical = None, source
    else:
        chosen = plan(source.repo, _repo_files(source), source)
        canonical = source if source.file else Source(repo=source.repo, quant=chosen.quant or None)
    name = name or short_name(canonical)
    _check_name(name, str(canonical), base)
    fetched: list[tuple[Path, bool]] = []  # (file, downloaded now)
    if chosen is None:
        fetched.append(_fetch_url(source.url, progress))
    else:
        for file in (*chosen.files, *([chosen.mmproj] if chosen.mmproj else [])):
            fetched.append(_fetch_hub(source, file, progress))
    files = [f for f, _ in fetched[:len(chosen.files) if chosen else 1]]
    mmproj = fetched[-1][0] if chosen and chosen.mmproj else None
    _verify(fetched, files, progress)
    progress.status("writing manifest")
    try:
        known = (user.entry(name) or {}).get("aliases", [])  # a re-pull keeps the names it had
        aliases = [a for a in dict.fromkeys([*known, str(canonical), text.strip()]) if a != name and not source.url]
        spec = user.add(files[0], name=name, mmproj=mmproj, source=str(canonical), aliases=aliases, base=base)
    except user.RegistryEditError as exc:
        raise PullFailed(str(exc)) from None
    return Pulled(spec.name, files[0], tuple(files), mmproj, str(canonical), sum(f.stat().st_size for f in files))


def _check_name(name: str, source: str, base: Path | None) -> None:
    """Before downloading: the name is usable and names nothing else (a re-pull updates its own)."""
    if not user.NAME.match(name):
        raise InvalidRequest(f"{name!r} is not a usable model name: letters, digits and . _ : - only", param="name")
    registry = Registry.load(base)
    if name in registry.models and name not in registry.user_models:
        raise InvalidRequest(f"{name!r} is a shipped model; choose another name with --name", param="name")
    mine = user.entry(name)
    if mine is not None and mine.get("source") != source:
        raise InvalidRequest(f"{name!r} already names {mine.get('source') or mine.get('path')}; choose another name "
                         f"with --name, or remove it first (localchat models rm {name})", param="name")


# -- the hub --------------------------------------------------------------------------------------

def _repo_files(source: Source) -> list[str]:
    from huggingface_hub import HfApi

    with _hub_errors(source.repo):
        info = HfApi().model_info(source.repo, revision=source.revision)
    return [s.rfilename for s in info.siblings or []]


def _fetch_hub(source: Source, file: str, progress: Progress) -> tuple[Path, bool]:
    from huggingface_hub import hf_hub_download

    bar = _Bars(progress, file)

    def fetch() -> Path:
        with _hub_errors(source.repo, file):
            return Path(hf_hub_download(source.repo, file, revision=source.revision, tqdm_class=bar))  # type: ignore

    return _retrying(fetch, file, progress), bar.used


def _retrying(fetch: Callable[[], Path], file: str, progress: Progress) -> Path:
    """A connection lost mid-file is tried again (RETRIES times, a second apart), each time
    resuming from what is already on disk."""
    import httpx

    for attempt in range(RETRIES + 1):
        try:
            return fetch()
        except PullFailed as exc:
            lost = isinstance(exc.__cause__, httpx.TransportError) and not isinstance(exc.__cause__, httpx.ConnectError)
            if attempt == RETRIES or not lost:  # a connection that broke mid-file, not one that never was
                raise
            progress.status(f"connection lost ({exc.__cause__}); resuming {file}")
            time.sleep(1)
    raise AssertionError("unreachable")


@contextmanager
def _hub_errors(repo: str | None, file: str | None = None) -> Iterator[None]:
    """huggingface_hub's and the network's errors as the user should read them (Ctrl-C passes)."""
    try:
        yield
    except LocalchatError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure of a download becomes a PullFailed
        raise _translate(exc, repo, file) from exc


def _translate(exc: Exception, repo: str | None, file: str | None) -> LocalchatError:
    import httpx
    from huggingface_hub import constants, errors

    where = f"{constants.ENDPOINT}/{repo}"
    if isinstance(exc, errors.GatedRepoError) and _has_token():
        return PullDenied(f"{repo} is gated and your token (HF_TOKEN or `hf auth login`) has no access to it: accept "
                          f"its terms at {where} with that account")
    if isinstance(exc, errors.GatedRepoError):
        return PullDenied(f"{repo} is gated: accept its terms at {where} (logged in to Hugging Face), then set "
                          "HF_TOKEN or run `hf auth login`")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return PullNotFound(f"no repository {repo} at {constants.ENDPOINT} (if it is private, set HF_TOKEN)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return PullNotFound(f"{repo} has no such revision")
    if isinstance(exc, errors.EntryNotFoundError):
        return PullNotFound(f"{repo} has no file {file}")
    if isinstance(exc, (errors.LocalEntryNotFoundError, httpx.ConnectError, httpx.TimeoutException)):
        where = f"{constants.ENDPOINT} (HF_ENDPOINT)" if repo else urlsplit(file or "").netloc
        return PullFailed(f"cannot reach {where} to get {file or repo}: is the network up? A pull resumes where "
                          "it stopped")
    if isinstance(exc, errors.HfHubHTTPError):
        return PullFailed(f"{constants.ENDPOINT} refused {file or repo}: {str(exc).splitlines()[0]}")
    return PullFailed(f"downloading {file or repo} failed: {exc}. Pull again to resume where it stopped")


def _has_token() -> bool:
    from huggingface_hub import get_token

    return bool(get_token())


class _Bars:
    """A tqdm stand-in for huggingface_hub's http_get: forwards bytes to a Progress."""

    def __init__(self, progress: Progress, file: str) -> None:
        self.progress, self.file, self.used = progress, file, False

    def __call__(self, *, total: int | None = None, initial: int = 0, **_: Any) -> "_Bars":
        self.used = True  # a download started (not already in the cache)
        self.progress.start(self.file, total, initial)
        return self

    def update(self, n: int = 1) -> None:
        self.progress.advance(self.file, n)

    def __enter__(self) -> "_Bars":
        return self

    def __exit__(self, *_: Any) -> None:
        return None

    def close(self) -> None:
        return None


# -- a GGUF at a URL ------------------------------------------------------------------------------

def _fetch_url(url: str, progress: Progress) -> tuple[Path, bool]:
    """Into LOCALCHAT_DATA_DIR/models/HOST/PATH, through `<file>.incomplete` (resumed by Range)."""
    from huggingface_hub.file_download import http_get

    parts = urlsplit(url)
    target = paths.data_dir() / "models" / re.sub(r"[^\w.-]", "_", parts.netloc) / \
        Path(*[re.sub(r"[^\w.-]", "_", s) for s in parts.path.split("/") if s])
    if target.is_file():
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    partial_file = target.with_name(target.name + ".incomplete")

    def fetch() -> Path:
        with open(partial_file, "ab") as f, _hub_errors(None, url):
            http_get(url, f, resume_size=f.tell(), tqdm_class=_Bars(progress, target.name))  # type: ignore[arg-type]
        os.replace(partial_file, target)
        return target

    return _retrying(fetch, target.name, progress), True


# -- checks ---------------------------------------------------------------------------------------

def _verify(fetched: list[tuple[Path, bool]], model: list[Path], progress: Progress) -> None:
    """sha256 of what was downloaded now (when the cache names the blob by it), then every GGUF
    header. A file that fails is removed from the cache, so the next pull fetches it again."""
    for path, fresh in fetched:
        blob = path.resolve()
        if fresh and SHA256.match(blob.name):
            progress.status("verifying sha256 digest")
            if _sha256(blob) != blob.name:
                _discard(path)
                raise PullFailed(f"{path.name} arrived corrupt (its sha256 is not the hub's): removed; pull again")
        try:
            meta = read_metadata(path)
        except (OSError, NotGGUF) as exc:
            _discard(path)
            raise PullFailed(f"{path.name} is not a usable GGUF file ({exc}); nothing was registered") from None
        if path in model and len(model) > 1 and (meta.get("split.no"), meta.get("split.count")) != \
                (model.index(path), len(model)):
            raise PullFailed(f"{path.name} is not part {model.index(path) + 1} of {len(model)} of a split GGUF")
    try:
        inspect(model[0])
    except ModelUnavailable as exc:
        raise PullFailed(f"{exc.message}; nothing was registered") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _discard(path: Path) -> None:
    """Remove a file (and, in the Hugging Face cache, the blob its link points to)."""
    blob = path.resolve()
    path.unlink(missing_ok=True)
    if blob != path:
        blob.unlink(missing_ok=True)

