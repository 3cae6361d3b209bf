"""Where the ledger survives restarts: SQLite (embedded) or a Redis hash (service mode).

The ledger writes behind: runs that changed are marked dirty and a background thread saves
their totals, tags and budget every `flush_interval_s` (and on close), so accounting never
waits on storage. A restarted gateway resumes each run's spending and budget; in-flight
reservations are not persisted (their requests died with the process).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any


class LedgerStore(ABC):
    @abstractmethod
    def load(self) -> dict[str, dict[str, Any]]:
        """Every saved run: run_id → {"totals", "tags", "budget"}."""

    @abstractmethod
    def save(self, states: dict[str, dict[str, Any]]) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class SqliteLedgerStore(LedgerStore):
    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, state TEXT)")

    def load(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT run_id, state FROM runs").fetchall()
        return {run_id: json.loads(state) for run_id, state in rows}

    def save(self, states: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO runs (run_id, state) VALUES (?, ?)",
                [(run_id, json.dumps(state)) for run_id, state in states.items()],
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RedisLedgerStore(LedgerStore):
    """One Redis hash, field = run id, value = the run's JSON state."""

    def __init__(self, url: str, key: str = "llmrl:llm_ledger") -> None:
        import redis

        self.key = key
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._redis.ping()

    def load(self) -> dict[str, dict[str, Any]]:
        raw = self._redis.hgetall(self.key)
        return {run_id.decode(): json.loads(state) for run_id, state in raw.items()}

    def save(self, states: dict[str, dict[str, Any]]) -> None:
        if states:
            self._redis.hset(self.key, mapping={k: json.dumps(v) for k, v in states.items()})

    def close(self) -> None:
        self._redis.close()
