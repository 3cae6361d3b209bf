"""Replay bundles: one run's LLM calls, with their answers, in one file for another machine.

A bundle is gzip-compressed JSON (plain JSON is read too; pickle never): the format's name and
version, the run (recipe, full config, status), its `results.json` (with its provenance), the
gateway settings it ran with (`call_log.settings_note`) and every call the gateway kept for it
(`call_log.CallRecord`: cache key, operation, model, the request as hashed, the answer).
`llmrl runs export` writes one; `llmrl replay` reads one and serves its answers through the
`replay` backend (`backends/replay.py`), so that the run plays again with no model loaded.

A bundle is untrusted input. `read_bundle` refuses, with a message that says why: a file or
its decompressed content over `MAX_BUNDLE_BYTES`; anything that is not UTF-8 JSON (a pickle is
named as such); JSON nested too deeply, with integers out of int64 or non-finite numbers; a
document that fails the schema (pydantic: the format version, every field's type, answers of
the shape their operation returns); a call whose key is not the hash of its request; model
names that are no plain names. It never opens a path a bundle names.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import os
import re
import tempfile
import threading
import zlib
from collections import deque
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmrl.common.json_limits import JsonLimitError, check_json_body
from llmrl.common.names import NAME_RULE, is_safe_name
from llmrl.llm_gateway.cache import cache_key, document_key
from llmrl.llm_gateway.errors import InvalidRequestError, ReplayMissError
from llmrl.llm_gateway.names import check_adapter

FORMAT = "llmrl-replay-bundle"
VERSION = 1
MAX_BUNDLE_BYTES = 256 * 2**20  # the file, and its content once decompressed
OPS = ("chat", "completion", "score", "embed")
KEY_PATTERN = r"^[0-9a-f]{64}$"
PROMPT_SHOWN = 80  # characters of a prompt a replay miss shows


class BundleError(ValueError):
    """A bundle that cannot be read or is refused; the message says which and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- the schema ---------------------------------------------------------------------------------
class ChatAnswer(_Strict):
    texts: list[str] = Field(min_length=1)
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    finish_reasons: list[str] = Field(default_factory=list)


class ScoreAnswer(_Strict):
    token_logprobs: list[list[float]] = Field(min_length=1)
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(0, ge=0)


class EmbedAnswer(_Strict):
    vectors: str  # base64 of float32 [n, dim]
    shape: list[int] = Field(min_length=2, max_length=2)
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _vectors_fit_the_shape(self) -> EmbedAnswer:
        if any(n < 0 for n in self.shape):
            raise ValueError(f"shape must be two sizes ≥ 0; got {self.shape}")
        try:
            size = len(base64.b64decode(self.vectors, validate=True))
        except (binascii.Error, ValueError):
            raise ValueError("vectors must be base64 (float32 values)") from None
        if size != self.shape[0] * self.shape[1] * 4:
            raise ValueError(f"vectors hold {size} bytes, not the {self.shape} float32 of shape")
        return self


ANSWERS: dict[str, type[BaseModel]] = {
    "chat": ChatAnswer,
    "completion": ChatAnswer,
    "score": ScoreAnswer,
    "embed": EmbedAnswer,
}


class CallRequest(_Strict):
    """The request as the gateway hashed it (`cache.key_document`)."""

    v: int
    op: Literal["chat", "completion", "score", "embed"]
    backend: str = Field(max_length=200)
    model: str = Field(max_length=4096)  # the backend's identity of the model
    adapter: str = Field(max_length=300)
    params: dict[str, Any]
    namespace: str | None = Field(None, max_length=300)

    def document(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class BundleCall(_Strict):
    key: str = Field(pattern=KEY_PATTERN)
    op: Literal["chat", "completion", "score", "embed"]
    model: str = Field(max_length=300)  # <model> or <model>:<adapter>@<version>
    request: CallRequest
    answer: dict[str, Any]
    sampled: bool = False
    cached: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> BundleCall:
        if self.request.op != self.op:
            raise ValueError(f"op {self.op!r} differs from its request's {self.request.op!r}")
        name, _, adapter = self.model.partition(":")
        if not is_safe_name(name):
            raise ValueError(f"model: {name[:100]!r} is not a model name ({NAME_RULE})")
        if adapter != self.request.adapter:
            raise ValueError(f"model {self.model!r} and its request's adapter differ")
        if adapter:
            try:
                check_adapter(adapter)
            except InvalidRequestError as exc:
                raise ValueError(str(exc)) from None
        try:
            ANSWERS[self.op].model_validate(self.answer)
        except ValidationError as exc:
            problems = "; ".join(
                f"answer.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                for e in exc.errors(include_url=False)[:3]
            )
            raise ValueError(f"not the answer to a {self.op} call: {problems}") from None
        if document_key(self.request.document()) != self.key:
            raise ValueError("key is not the hash of the call's request (changed after export)")
        return self


class Price(_Strict):
    prompt: float = Field(0.0, ge=0)
    completion: float = Field(0.0, ge=0)


class ModelNote(BaseModel):
    """A model's settings as the run's gateway had them; only backend and price are used."""

    model_config = ConfigDict(extra="allow")
    backend: str = Field(max_length=200)
    price: Price = Field(default_factory=Price)


class CacheNote(_Strict):
    backend: str = Field(max_length=50)
    share: str = Field("per_key", max_length=50)


class GatewayNote(_Strict):
    default_model: str = Field(max_length=128)
    default_embedding_model: str = Field(max_length=128)
    cache: CacheNote
    models: dict[str, ModelNote]

    @model_validator(mode="after")
    def _names(self) -> GatewayNote:
        for name in (self.default_model, self.default_embedding_model, *self.models):
            if not is_safe_name(name):
                raise ValueError(f"model {name[:100]!r} is not a model name ({NAME_RULE})")
        return self


class RunInfo(_Strict):
    run_id: str = Field(max_length=200)
    recipe: str = Field(max_length=128)
    config: dict[str, Any]
    status: str = Field(max_length=50)


class ResultsDoc(BaseModel):
    """A run's results.json (rows of cells; the other keys as the run wrote them)."""

    model_config = ConfigDict(extra="allow")
    title: str
    rows: list[dict[str, Any]]
    columns: list[str] | None = None


class Summary(_Strict):
    requests: int = Field(ge=0)  # the run's answered requests, the cache's included
    calls: int = Field(ge=0)  # kept calls (a deterministic one once)
    sampled: int = Field(ge=0)  # of them: sampled without a seed, each occurrence


class Bundle(_Strict):
    format: Literal["llmrl-replay-bundle"]
    version: int
    created: str = Field(max_length=100)
    run: RunInfo
    results: ResultsDoc
    gateway: GatewayNote | None = None
    calls: list[BundleCall]
    summary: Summary

    @property
    def provenance(self) -> dict[str, Any]:
        """Where and with which numerics the run was made (its results' `provenance`); {} for
        a run recorded before provenance was."""
        recorded = (self.results.model_extra or {}).get("provenance")
        return recorded if isinstance(recorded, dict) else {}

    def model_names(self) -> list[str]:
        """Every model name the run called, and the gateway's defaults (sorted, unique)."""
        names = {call.model.partition(":")[0] for call in self.calls}
        if self.gateway is not None:
            names |= {self.gateway.default_model, self.gateway.default_embedding_model}
        return sorted(names)


# -- reading and writing ------------------------------------------------------------------------
def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def read_bundle(path: str | Path, max_bytes: int | None = None) -> Bundle:
    """The bundle in `path`, checked; BundleError saying why it is refused."""
    limit = MAX_BUNDLE_BYTES if max_bytes is None else max_bytes
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > limit:
            raise BundleError(
                f"{path}: {_mib(size)}, over the {_mib(limit)} a bundle may have; not read"
            )
        with path.open("rb") as file:
            raw = file.read(limit + 1)
    except OSError as exc:
        raise BundleError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > limit:  # it grew since stat
        raise BundleError(f"{path}: over the {_mib(limit)} a bundle may have; not read")
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unpacked:
                raw = unpacked.read(limit + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise BundleError(f"{path}: truncated or corrupt gzip data ({exc})") from None
        if len(raw) > limit:
            raise BundleError(
                f"{path}: its content is over {_mib(limit)} once decompressed, more than a "
                "bundle may hold; not read"
            )
    return parse_bundle(raw, str(path))


def parse_bundle(raw: bytes, where: str = "bundle") -> Bundle:
    """A bundle from its JSON bytes (decompressed), checked; BundleError saying why not."""
    start = raw.lstrip()[:1]
    # pickles start with PROTO (protocol 2 and later) or end with STOP ('.'), JSON neither
    if raw[:1] == b"\x80" or (start != b"{" and raw.rstrip().endswith(b".")):
        raise BundleError(
            f"{where}: this looks like a Python pickle, which llmrl never loads; a bundle is "
            "JSON (gzip-compressed), as `llmrl runs export` writes it"
        )
    if start != b"{":
        raise BundleError(f"{where}: not a replay bundle (a bundle is a JSON object)")
    try:
        check_json_body(raw)
    except JsonLimitError as exc:
        raise BundleError(f"{where}: refused: {str(exc).replace('body', 'bundle', 1)}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BundleError(f"{where}: not UTF-8 text, so no JSON bundle") from None
    except json.JSONDecodeError as exc:
        raise BundleError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
            "truncated or not a bundle"
        ) from None
    except RecursionError:
        raise BundleError(f"{where}: JSON nested too deeply") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BundleError(f'{where}: not a replay bundle (no "format": "{FORMAT}")')
    version = data.get("version")
    if version != VERSION:
        newer = isinstance(version, int) and version > VERSION
        raise BundleError(
            f"{where}: bundle format version {version!r}; this llmrl reads version {VERSION}"
            + (" (the bundle is newer: update llmrl)" if newer else "")
        )
    try:
        return Bundle.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc'])}: "
            f"{error['msg'].removeprefix('Value error, ')}"
            for error in exc.errors(include_url=False)[:5]
        ]
        more = exc.error_count() - len(problems)
        raise BundleError(
            f"{where}: not a valid bundle: "
            + "; ".join(problems)
            + (f" (and {more} more)" if more > 0 else "")
        ) from None


def write_bundle(document: dict[str, Any], path: str | Path, max_bytes: int | None = None) -> int:
    """Write `document` (a bundle's JSON object) gzip-compressed to `path` (whole or not at
    all); returns its size in bytes. Refuses a bundle a replay would refuse for its size."""
    limit = MAX_BUNDLE_BYTES if max_bytes is None else max_bytes
    Bundle.model_validate(document)  # what a replay will check, checked before writing
    raw = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    if len(raw) > limit:
        raise BundleError(
            f"the bundle would hold {_mib(len(raw))} of JSON, over the {_mib(limit)} a replay "
            "reads; not written"
        )
    packed = gzip.compress(raw, compresslevel=6, mtime=0)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(packed)
        os.chmod(temporary, 0o644)  # a file to hand on (mkstemp makes it the owner's only)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return len(packed)


# -- serving a bundle's answers ----------------------------------------------------------------
def prompt_start(op: str, params: dict[str, Any]) -> str:
    """The start of a request's prompt, on one line, for messages: of a chat, its first
    message's start and its last message's ('…' where cut)."""

    def cut(text: Any, size: int = PROMPT_SHOWN) -> str:
        text = re.sub(r"\s+", " ", str(text)).strip()
        return text[:size] + ("…" if len(text) > size else "")

    if op == "embed":
        return cut((params.get("texts") or [""])[0])
    prompt = params.get("messages") or params.get("prompt") or ""
    if not isinstance(prompt, list):
        return cut(prompt)
    shown = [f"{m.get('role')}: {m.get('content')}" for m in prompt if isinstance(m, dict)]
    if len(shown) <= 1:
        return cut("".join(shown))
    return f"{cut(shown[0], PROMPT_SHOWN // 2)} … {cut(shown[-1], PROMPT_SHOWN)}"


class CallIndex:
    """A bundle's answers by cache key: deterministic calls any number of times, sampled ones
    (temperature > 0 without a seed) each once, in the order the run got them."""

    def __init__(self, bundle: Bundle) -> None:
        self.answers: dict[str, dict[str, Any]] = {}
        self.sampled: dict[str, deque[dict[str, Any]]] = {}
        self.cached_first: dict[str, dict[str, Any]] = {}  # the run's cache served these first
        # model name → the (backend, identity) pairs its keys were made with
        self.identities: dict[str, list[tuple[str, str]]] = {}
        self._lock = threading.Lock()
        for call in bundle.calls:
            name = call.model.partition(":")[0]
            pair = (call.request.backend, call.request.model)
            if pair not in self.identities.setdefault(name, []):
                self.identities[name].append(pair)
            if call.sampled:
                self.sampled.setdefault(call.key, deque()).append(call.answer)
            else:
                self.answers.setdefault(call.key, call.answer)
                if call.cached:
                    self.cached_first.setdefault(call.key, call.answer)

    def keys(
        self, name: str, op: str, adapter: str, namespace: str, params: dict[str, Any]
    ) -> list[str]:
        """The request's cache key under each identity model `name` had in the run."""
        return [
            cache_key(op, backend, identity, adapter, namespace=namespace, **params)
            for backend, identity in self.identities.get(name, [])
        ]

    def peek(self, keys: list[str]) -> dict[str, Any] | None:
        with self._lock:
            for key in keys:
                if key in self.answers:
                    return self.answers[key]
                if self.sampled.get(key):
                    return self.sampled[key][0]
        return None

    def take(
        self,
        name: str,
        op: str,
        adapter: str,
        namespace: str,
        params: dict[str, Any],
        sampled: bool,
    ) -> dict[str, Any]:
        """The answer to this request (a sampled one's next); ReplayMissError naming the
        model, the operation and the prompt's start when the bundle has none."""
        keys = self.keys(name, op, adapter, namespace, params)
        exhausted = 0
        with self._lock:
            for key in keys:
                if sampled and key in self.sampled:
                    if self.sampled[key]:
                        return self.sampled[key].popleft()
                    exhausted += 1
                elif key in self.answers:
                    return self.answers[key]
        label = f"{name}:{adapter}" if adapter else name
        shown = prompt_start(op, params)
        if exhausted:
            raise ReplayMissError(
                f"replay: the bundle's answers to this sampled call (temperature > 0, no seed) "
                f"are used up: model {label!r}, {op}, prompt {shown!r}; the replayed run asks "
                "it more often than the recorded run did",
                "model",
            )
        key = keys[0][:12] if keys else "-"
        raise ReplayMissError(
            f"replay: no answer in the bundle for this call: model {label!r}, {op}, prompt "
            f"{shown!r} (key {key}…); the recorded run never asked it (other code, config or "
            "data than the run's)",
            "model",
        )


_indexes: dict[str, CallIndex] = {}
_indexes_lock = threading.Lock()


def serve_bundle(path: str | Path, bundle: Bundle) -> CallIndex:
    """Make `bundle` (read from `path`) what replay backends naming `path` answer from, with
    every sampled answer unused (a replay starts here)."""
    index = CallIndex(bundle)
    with _indexes_lock:
        _indexes[str(Path(path).resolve())] = index
    return index


def bundle_index(path: str | Path) -> CallIndex:
    """The answers of the bundle in `path`: those `serve_bundle` set, else read now."""
    resolved = str(Path(path).resolve())
    with _indexes_lock:
        index = _indexes.get(resolved)
    if index is not None:
        return index
    return serve_bundle(resolved, read_bundle(resolved))
