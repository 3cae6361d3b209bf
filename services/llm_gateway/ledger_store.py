"""Where the ledger survives restarts: SQLite (embedded) or a Redis hash (service mode).

The ledger writes behind: runs that changed are marked dirty and a background thread saves
their totals, tags and budget every `flush_interval_s` (and on close), so accounting never
waits on storage. A restarted gateway resumes each run's spending and budget; in-flight
reservations are not persisted (their requests died with the process).

Beside the totals each store keeps the runs' calls (`call_log`): SQLite in the tables `calls`
and `call_settings` of the same file, Redis in `<key>:calls:<run>` (a hash by cache key),
`<key>:sampled:<run>` (a list, in order) and the hash `<key>:call_settings`.
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

    @abstractmethod
    def save_calls(
        self, calls: list[tuple[str, dict[str, Any]]], settings: dict[str, dict[str, Any]]
    ) -> None:
        """Keep calls, (run_id, `CallRecord.to_dict()`) in order, and runs' settings notes
        (run_id → note; a run's first note stays). A deterministic call (not `sampled`) is kept
        once per run and key; a sampled one at every occurrence."""

    @abstractmethod
    def run_calls(self, run_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The run's kept calls (deterministic ones, then sampled ones in order) and its
        settings note (None: none kept)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class SqliteLedgerStore(LedgerStore):
    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, state TEXT)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "run_id TEXT NOT NULL, key TEXT NOT NULL, sampled INTEGER NOT NULL, record TEXT)"
        )
        # a deterministic call once per run and key (INSERT OR IGNORE), a sampled one each time
        self._db.execute(
            "CREATE UNIQUE INDEX IF NOT EXISTS calls_once ON calls (run_id, key) WHERE sampled = 0"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS calls_of_run ON calls (run_id, id)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS call_settings (run_id TEXT PRIMARY KEY, settings TEXT)"
        )

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

    def save_calls(
        self, calls: list[tuple[str, dict[str, Any]]], settings: dict[str, dict[str, Any]]
    ) -> None:
        rows = [
            (run_id, call["key"], int(bool(call["sampled"])), json.dumps(call))
            for run_id, call in calls
        ]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO calls (run_id, key, sampled, record) "
                    "VALUES (?, ?, ?, ?)",
                    rows,
                )
                self._db.executemany(
                    "INSERT OR IGNORE INTO call_settings (run_id, settings) VALUES (?, ?)",
                    [(run_id, json.dumps(note)) for run_id, note in settings.items()],
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def run_calls(self, run_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        with self._lock:
            rows = self._db.execute(
                "SELECT record FROM calls WHERE run_id = ? ORDER BY sampled, id", (run_id,)
            ).fetchall()
            note = self._db.execute(
                "SELECT settings FROM call_settings WHERE run_id = ?", (run_id,)
            ).fetchone()
        return [json.loads(row[0]) for row in rows], None if note is None else json.loads(note[0])

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

    def save_calls(
        self, calls: list[tuple[str, dict[str, Any]]], settings: dict[str, dict[str, Any]]
    ) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for run_id, call in calls:
            if call["sampled"]:
                pipe.rpush(f"{self.key}:sampled:{run_id}", json.dumps(call))
            else:
                pipe.hsetnx(f"{self.key}:calls:{run_id}", call["key"], json.dumps(call))
        for run_id, note in settings.items():
            pipe.hsetnx(f"{self.key}:call_settings", run_id, json.dumps(note))
        pipe.execute()

    def run_calls(self, run_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        once = self._redis.hgetall(f"{self.key}:calls:{run_id}")
        sampled = self._redis.lrange(f"{self.key}:sampled:{run_id}", 0, -1)
        note = self._redis.hget(f"{self.key}:call_settings", run_id)
        calls = [json.loads(once[key]) for key in sorted(once)] + [json.loads(s) for s in sampled]
        return calls, None if note is None else json.loads(note)

    def close(self) -> None:
        self._redis.close()
