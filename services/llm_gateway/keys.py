"""Gateway-issued API keys (as LiteLLM's virtual keys): hand an OpenAI client a key that can
only spend its own budget.

A key is `sk-llmrl-<id>-<secret>`. The gateway keeps only its SHA-256 (the secret is 256
random bits, so a fast hash is enough) and compares digests in constant time; the key itself
is shown once, when it is created. A key may carry its own rate limits (requests in flight,
tokens per minute: `admission`). What a key spends is recorded in the ledger under the run
`key:<id>`, whose USD budget is the key's, so it is enforced as any run's budget is (429 when
spent). An expired, revoked or unknown key is refused the same way (401).

Records are saved where the ledger is (SQLite embedded, a Redis hash in service mode, or
memory) and read on every check, so a revocation reaches every replica at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KEY_PREFIX = "sk-llmrl-"
ID_HEX = 12  # characters of a key's id (6 random bytes): enough to never collide in practice
RUN_PREFIX = "key:"
_DUMMY_DIGEST = hashlib.sha256(b"no such key").hexdigest()  # compared against for unknown ids


@dataclass
class KeyRecord:
    id: str
    digest: str  # SHA-256 of the whole key, hex
    budget_usd: float
    expires_at: float | None  # Unix time; None: never
    models: list[str] | None  # model names this key may call; None: every configured model
    name: str
    created_at: float
    revoked: bool = False
    # this key's own rate limits (None: the gateway's limits.key_max_concurrent and
    # limits.key_tokens_per_minute, read at each request)
    max_concurrent: int | None = None
    tokens_per_minute: int | None = None

    @property
    def run_id(self) -> str:
        """The ledger run the key's spending is recorded under."""
        return RUN_PREFIX + self.id

    def usable(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return not self.revoked and (self.expires_at is None or now < self.expires_at)

    def public(self) -> dict[str, Any]:
        """What listing a key shows: everything but its digest."""
        row = asdict(self)
        del row["digest"]
        return row


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> tuple[str, str]:
    """(id, key) of a fresh key."""
    key_id = secrets.token_hex(ID_HEX // 2)
    return key_id, f"{KEY_PREFIX}{key_id}-{secrets.token_urlsafe(32)}"


def looks_like_key(value: str | bytes) -> bool:
    """Whether a bearer credential is meant as a gateway key (then it is checked as one)."""
    prefix = KEY_PREFIX.encode() if isinstance(value, bytes) else KEY_PREFIX
    return value.startswith(prefix)  # type: ignore[arg-type]


class KeyStore(ABC):
    """Where key records live; every read goes to storage (revocations are seen at once)."""

    @abstractmethod
    def get(self, key_id: str) -> KeyRecord | None: ...

    @abstractmethod
    def put(self, record: KeyRecord) -> None: ...

    @abstractmethod
    def all(self) -> list[KeyRecord]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def verify(self, presented: str) -> KeyRecord | None:
        """The usable record a presented key belongs to, else None (unknown, wrong secret,
        expired or revoked alike). The digests are compared in constant time."""
        key_id = presented[len(KEY_PREFIX) : len(KEY_PREFIX) + ID_HEX]
        record = self.get(key_id) if looks_like_key(presented) else None
        expected = record.digest if record is not None else _DUMMY_DIGEST
        matches = hmac.compare_digest(digest_of(presented), expected)
        return record if matches and record is not None and record.usable() else None


_FIELDS = frozenset(KeyRecord.__dataclass_fields__)


def _from_json(raw: str | bytes) -> KeyRecord:
    """A stored record; fields a newer gateway added are left out (replicas may differ)."""
    return KeyRecord(**{k: v for k, v in json.loads(raw).items() if k in _FIELDS})


class MemoryKeyStore(KeyStore):
    def __init__(self) -> None:
        self._records: dict[str, KeyRecord] = {}
        self._lock = threading.Lock()

    def get(self, key_id: str) -> KeyRecord | None:
        with self._lock:
            record = self._records.get(key_id)
            return None if record is None else KeyRecord(**asdict(record))

    def put(self, record: KeyRecord) -> None:
        with self._lock:
            self._records[record.id] = KeyRecord(**asdict(record))

    def all(self) -> list[KeyRecord]:
        with self._lock:
            return [KeyRecord(**asdict(r)) for r in self._records.values()]


class SqliteKeyStore(KeyStore):
    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS keys (id TEXT PRIMARY KEY, record TEXT)")

    def get(self, key_id: str) -> KeyRecord | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM keys WHERE id = ?", (key_id,)).fetchone()
        return None if row is None else _from_json(row[0])

    def put(self, record: KeyRecord) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO keys (id, record) VALUES (?, ?)",
                (record.id, json.dumps(asdict(record))),
            )

    def all(self) -> list[KeyRecord]:
        with self._lock:
            rows = self._db.execute("SELECT record FROM keys").fetchall()
        return [_from_json(row[0]) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RedisKeyStore(KeyStore):
    """One Redis hash: field = key id, value = the record's JSON."""

    def __init__(self, url: str, key: str = "llmrl:llm_keys") -> None:
        import redis

        self.key = key
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)

    def get(self, key_id: str) -> KeyRecord | None:
        raw = self._redis.hget(self.key, key_id)
        return None if raw is None else _from_json(raw)

    def put(self, record: KeyRecord) -> None:
        self._redis.hset(self.key, record.id, json.dumps(asdict(record)))

    def all(self) -> list[KeyRecord]:
        return [_from_json(raw) for raw in self._redis.hgetall(self.key).values()]

    def close(self) -> None:
        self._redis.close()
