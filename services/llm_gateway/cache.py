"""Exact-match response cache: a canonical key and two stores behind one interface.

The key is the SHA-256 of a canonical JSON document (sorted keys, no whitespace, numbers
normalised so 0 and 0.0 are the same) holding the operation, backend, model, adapter version,
every generation parameter and the prompt, and the caller's namespace (`cache.share`: by
default each gateway-issued key has its own; service-token callers share one). Parameters
that change the answer are always in the key; a request that differs in any of them gets a
different key. SQLite backs embedded mode, Redis service mode; both expire entries after a
TTL, and a small in-process LRU in front of either serves repeated hits without a round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from pathlib import Path
from typing import Any

KEY_VERSION = 1  # bump when the meaning of cached values changes


def _canonical(value: Any) -> Any:
    """Numbers that compare equal serialise equally (1 == 1.0); tuples become lists."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    raise TypeError(f"cannot put a {type(value).__name__} in a cache key")


SHARED_NAMESPACE = ""  # the service token's callers (and every caller with cache.share: global)


def key_document(
    op: str,
    backend: str,
    model: str,
    adapter: str,
    *,
    namespace: str = SHARED_NAMESPACE,
    **params: Any,
) -> dict[str, Any]:
    """Everything that determines a response, as the document `cache_key` hashes: the
    request as the gateway hashed it (a run's recorded calls keep it beside the answer)."""
    document: dict[str, Any] = {
        "v": KEY_VERSION,
        "op": op,
        "backend": backend,
        "model": model,
        "adapter": adapter,
        "params": params,
    }
    if namespace != SHARED_NAMESPACE:  # absent otherwise: the shared cache's keys stay valid
        document["namespace"] = namespace
    return document


def document_key(document: dict[str, Any]) -> str:
    """The SHA-256 of a key document's canonical JSON."""
    text = json.dumps(
        _canonical(document), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode()).hexdigest()


def cache_key(
    op: str,
    backend: str,
    model: str,
    adapter: str,
    *,
    namespace: str = SHARED_NAMESPACE,
    **params: Any,
) -> str:
    """The canonical hash of everything that determines a response, within `namespace`: an
    answer is only ever served to callers of the namespace that paid for it (tenancy)."""
    return document_key(key_document(op, backend, model, adapter, namespace=namespace, **params))


def cache_namespace(key_id: str | None, share: str) -> str:
    """The cache namespace of a caller: with `share` "per_key" its issued key's own (`key_id`),
    else (the service token, in-process and gRPC callers, or `share` "global") the shared one."""
    if key_id is None or share == "global":
        return SHARED_NAMESPACE
    return f"key:{key_id}"


class ResponseCache(ABC):
    """A key → JSON-able value store with a TTL (0: keep forever). A store that `serves_async`
    is read and written from an event loop too (`aget`, `aput`): Redis, through a client of
    that loop's own."""

    serves_async = False

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s

    @abstractmethod
    def get(self, key: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def put(self, key: str, value: dict[str, Any]) -> None: ...

    async def aget(self, key: str) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} is not read from an event loop")

    async def aput(self, key: str, value: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} is not written from an event loop")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class NullCache(ResponseCache):
    """No cache at all (cache.backend: none)."""

    serves_async = True

    def get(self, key: str) -> dict[str, Any] | None:
        return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        return None

    async def aget(self, key: str) -> dict[str, Any] | None:
        return None

    async def aput(self, key: str, value: dict[str, Any]) -> None:
        return None


class SqliteCache(ResponseCache):
    """One table in a SQLite file; thread-safe through one connection and a lock."""

    def __init__(self, path: str | Path, ttl_s: float) -> None:
        super().__init__(ttl_s)
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL)"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value, expires_at FROM responses WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            if row[1] is not None and row[1] <= time.time():
                self._db.execute("DELETE FROM responses WHERE key = ?", (key,))
                return None
        return json.loads(row[0])

    def put(self, key: str, value: dict[str, Any]) -> None:
        expires_at = time.time() + self.ttl_s if self.ttl_s > 0 else None
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, value, expires_at) VALUES (?, ?, ?)",
                (key, json.dumps(value), expires_at),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RedisCache(ResponseCache):
    """Keys `<prefix><sha256>` holding JSON, expiring through Redis's own TTL."""

    serves_async = True

    def __init__(self, url: str, ttl_s: float, prefix: str = "llmrl:llm_cache:") -> None:
        super().__init__(ttl_s)
        import redis

        self.prefix = prefix
        self._url = url
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._redis.ping()  # fail at start-up, not on the first request
        # an event loop's own client (redis.asyncio's connections belong to one loop)
        self._async: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def _ttl_ms(self) -> int | None:
        return max(1, int(self.ttl_s * 1000)) if self.ttl_s > 0 else None

    def get(self, key: str) -> dict[str, Any] | None:
        raw = self._redis.get(self.prefix + key)
        return None if raw is None else json.loads(raw)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._redis.set(self.prefix + key, json.dumps(value), px=self._ttl_ms())

    def _loop_client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            import redis.asyncio

            client = self._async[loop] = redis.asyncio.Redis.from_url(
                self._url, socket_timeout=5, socket_connect_timeout=5
            )
        return client

    async def aget(self, key: str) -> dict[str, Any] | None:
        raw = await self._loop_client().get(self.prefix + key)
        return None if raw is None else json.loads(raw)

    async def aput(self, key: str, value: dict[str, Any]) -> None:
        await self._loop_client().set(self.prefix + key, json.dumps(value), px=self._ttl_ms())

    def close(self) -> None:
        self._redis.close()
        # the loops' clients: their connections close with their loops (uvicorn's at shutdown)
        self._async.clear()


class FrontedCache(ResponseCache):
    """A small in-process LRU in front of a shared store: repeated hits skip the Redis or
    SQLite round trip. Cached responses never change once written, so the only staleness to
    respect is the TTL, which each local entry keeps."""

    def __init__(self, store: ResponseCache, max_entries: int = 10_000) -> None:
        super().__init__(store.ttl_s)
        self.store = store
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float | None, dict[str, Any]]] = OrderedDict()

    def _remember(self, key: str, value: dict[str, Any]) -> None:
        expires_at = time.monotonic() + self.ttl_s if self.ttl_s > 0 else None
        with self._lock:
            self._entries[key] = (expires_at, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def get(self, key: str) -> dict[str, Any] | None:
        value = self._local(key)
        if value is not None:
            return value
        value = self.store.get(key)
        if value is not None:
            self._remember(key, value)  # (its remaining TTL in the store may be shorter)
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.store.put(key, value)
        self._remember(key, value)

    @property
    def serves_async(self) -> bool:  # type: ignore[override]
        return self.store.serves_async

    def _local(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                expires_at, value = entry
                if expires_at is None or expires_at > time.monotonic():
                    self._entries.move_to_end(key)
                    return value
                del self._entries[key]
        return None

    async def aget(self, key: str) -> dict[str, Any] | None:
        value = self._local(key)
        if value is not None:
            return value
        value = await self.store.aget(key)
        if value is not None:
            self._remember(key, value)
        return value

    async def aput(self, key: str, value: dict[str, Any]) -> None:
        await self.store.aput(key, value)
        self._remember(key, value)

    def close(self) -> None:
        self.store.close()
