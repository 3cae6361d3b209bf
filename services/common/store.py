"""The durable run store: runs, their phases, their episodes and their artifacts, in SQLite.

One file in the artifact volume (`LLMRL_HOME/orchestrator.sqlite` in service mode,
`<out>/run.sqlite` for an embedded run). Everything a restarted orchestrator needs to resume
a run lives here: the run's recipe and config, which phases completed (with their outputs),
and every episode record. Episodes are keyed by (run_id, episode_id), so storing an episode
that the queue delivered twice is a no-op: that is what makes at-least-once delivery safe.
Experiments (named sets of planned runs) live here too, and a `catalog` table records where
embedded runs' own stores are (used in `$LLMRL_HOME/embedded.sqlite`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmrl.common.episodes import EpisodeRecord

# Run states. A run is "unfinished" (and resumed by a restarted orchestrator) while
# its status is one of ACTIVE_STATES.
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED = (
    "pending",
    "running",
    "completed",
    "failed",
    "cancelled",
)
ACTIVE_STATES = (PENDING, RUNNING)
RUN_STATES = (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    recipe TEXT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    current_phase TEXT,
    error TEXT,
    summary TEXT NOT NULL DEFAULT '{}',
    out_dir TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    tenant TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS phases (
    run_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    status TEXT NOT NULL,
    outputs TEXT NOT NULL DEFAULT '{}',
    started REAL,
    finished REAL,
    PRIMARY KEY (run_id, phase)
);
CREATE TABLE IF NOT EXISTS episodes (
    run_id TEXT NOT NULL,
    episode_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    idx INTEGER NOT NULL,
    record TEXT NOT NULL,
    stored REAL NOT NULL,
    PRIMARY KEY (run_id, episode_id)
);
CREATE INDEX IF NOT EXISTS episodes_by_phase ON episodes (run_id, phase, idx);
CREATE TABLE IF NOT EXISTS artifacts (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS experiments (
    experiment_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    out_dir TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS experiment_runs (
    experiment_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    recipe TEXT NOT NULL,
    config TEXT NOT NULL,
    point TEXT NOT NULL,
    seed INTEGER NOT NULL,
    PRIMARY KEY (experiment_id, idx)
);
CREATE TABLE IF NOT EXISTS catalog (
    entry_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    recipe TEXT NOT NULL,
    store TEXT NOT NULL,
    out_dir TEXT NOT NULL,
    created REAL NOT NULL
);
"""


@dataclass
class RunRow:
    run_id: str
    recipe: str
    config: dict[str, Any]
    status: str
    current_phase: str | None
    error: str | None
    summary: dict[str, Any]
    out_dir: str
    cancel_requested: bool
    created: float
    updated: float
    phases: list[dict[str, Any]] = field(default_factory=list)
    tenant: str = ""  # who submitted it, as the orchestrator's auth tells callers apart
    # the numerics it computes with (`numerics_provenance()`), where the process that made it
    # runs it: a resumed or reused run must compute with the same; {} where not recorded
    numerics: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ExperimentRow:
    """An experiment: its spec, and its planned runs (a run row exists once it has started)."""

    experiment_id: str
    name: str
    spec: dict[str, Any]
    status: str
    cancel_requested: bool
    out_dir: str
    created: float
    updated: float
    runs: list[dict[str, Any]] = field(default_factory=list)  # run_id, recipe, config, point, seed


def split_episode_id(episode_id: str) -> tuple[str, int]:
    """`"evaluate/17"` → ("evaluate", 17): episode ids are `<phase>/<index>`."""
    phase, _, index = episode_id.rpartition("/")
    if not phase or not index.isdigit():
        raise ValueError(f"episode id {episode_id!r} is not of the form <phase>/<index>")
    return phase, int(index)


def new_run_id(recipe: str) -> str:
    return f"{recipe}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


class RunStore:
    """Thread-safe access to one SQLite run store (WAL mode: readers never block the writer)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._add_column("runs", "tenant", "TEXT NOT NULL DEFAULT ''")  # stores made before it
        self._add_column("runs", "numerics", "TEXT NOT NULL DEFAULT '{}'")

    def _add_column(self, table: str, column: str, declaration: str) -> None:
        with self._lock:
            names = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column in names:
                return
            try:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            except sqlite3.OperationalError as exc:  # another process added it meanwhile
                if "duplicate column" not in str(exc):
                    raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._db:
            yield self._db

    # -- runs ---------------------------------------------------------------------------
    def create_run(
        self,
        recipe: str,
        config: dict[str, Any],
        out_dir: str | Path,
        run_id: str | None = None,
        tenant: str = "",
        numerics: dict[str, Any] | None = None,
    ) -> str:
        run_id = run_id or new_run_id(recipe)
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs"
                " (run_id, recipe, config, status, out_dir, created, updated, tenant, numerics)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    recipe,
                    json.dumps(config),
                    PENDING,
                    str(out_dir),
                    now,
                    now,
                    tenant,
                    json.dumps(numerics or {}),
                ),
            )
        return run_id

    def get_run(self, run_id: str, with_phases: bool = True) -> RunRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        run = _run_from_row(row)
        if with_phases:
            run.phases = self.phases(run_id)
        return run

    def list_runs(self, status: str | None = None) -> list[RunRow]:
        query, args = "SELECT * FROM runs", ()
        if status is not None:
            query, args = query + " WHERE status = ?", (status,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created", args).fetchall()
        return [_run_from_row(row) for row in rows]

    def unfinished_runs(self) -> list[RunRow]:
        return [run for run in self.list_runs() if run.status in ACTIVE_STATES]

    def update_run(self, run_id: str, **fields: Any) -> None:
        allowed = {"status", "current_phase", "error", "summary", "cancel_requested"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"cannot update run fields {sorted(unknown)}")
        if "summary" in fields:
            fields["summary"] = json.dumps(fields["summary"])
        if "cancel_requested" in fields:
            fields["cancel_requested"] = int(bool(fields["cancel_requested"]))
        columns = ", ".join(f"{name} = ?" for name in fields)
        with self._tx() as db:
            db.execute(
                f"UPDATE runs SET {columns}, updated = ? WHERE run_id = ?",
                (*fields.values(), time.time(), run_id),
            )

    def delete_run(self, run_id: str) -> None:
        with self._tx() as db:
            for table in ("runs", "phases", "episodes", "artifacts"):
                db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    # -- phases -------------------------------------------------------------------------
    def phases(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM phases WHERE run_id = ? ORDER BY started", (run_id,)
            ).fetchall()
        return [
            {
                "phase": row["phase"],
                "status": row["status"],
                "outputs": json.loads(row["outputs"]),
                "started": row["started"],
                "finished": row["finished"],
            }
            for row in rows
        ]

    def phase_outputs(self, run_id: str, phase: str) -> dict[str, Any] | None:
        """The outputs of a completed phase, or None when it has not completed."""
        with self._lock:
            row = self._db.execute(
                "SELECT outputs FROM phases WHERE run_id = ? AND phase = ? AND status = ?",
                (run_id, phase, COMPLETED),
            ).fetchone()
        return None if row is None else json.loads(row["outputs"])

    def start_phase(self, run_id: str, phase: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO phases (run_id, phase, status, started) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (run_id, phase) DO UPDATE SET status = excluded.status",
                (run_id, phase, RUNNING, time.time()),
            )
            db.execute(
                "UPDATE runs SET current_phase = ?, updated = ? WHERE run_id = ?",
                (phase, time.time(), run_id),
            )

    def complete_phase(self, run_id: str, phase: str, outputs: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE phases SET status = ?, outputs = ?, finished = ?"
                " WHERE run_id = ? AND phase = ?",
                (COMPLETED, json.dumps(outputs), time.time(), run_id, phase),
            )

    def end_phase(self, run_id: str, phase: str, status: str) -> None:
        """A phase that ended without completing (failed, cancelled): its status says so."""
        with self._tx() as db:
            db.execute(
                "UPDATE phases SET status = ?, finished = ? WHERE run_id = ? AND phase = ?"
                " AND status = ?",
                (status, time.time(), run_id, phase, RUNNING),
            )

    # -- episodes -----------------------------------------------------------------------
    def store_episode(self, record: EpisodeRecord) -> bool:
        """Store one episode; False (and nothing changes) when it was already stored."""
        phase, index = split_episode_id(record.episode_id)
        with self._tx() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO episodes (run_id, episode_id, phase, idx, record, stored)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (record.run_id, record.episode_id, phase, index, record.to_json(), time.time()),
            )
            return cursor.rowcount == 1

    def stored_episode_ids(self, run_id: str, episode_ids: Iterable[str]) -> set[str]:
        wanted = list(episode_ids)
        found: set[str] = set()
        with self._lock:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT episode_id FROM episodes WHERE run_id = ? AND episode_id IN ({marks})",
                    (run_id, *chunk),
                ).fetchall()
                found.update(row["episode_id"] for row in rows)
        return found

    def count_episodes(self, run_id: str, phase: str | None = None) -> int:
        query, args = "SELECT COUNT(*) FROM episodes WHERE run_id = ?", [run_id]
        if phase is not None:
            query, args = query + " AND phase = ?", [*args, phase]
        with self._lock:
            return int(self._db.execute(query, args).fetchone()[0])

    def llm_totals(self, run_id: str) -> dict[str, float]:
        """LLM calls, tokens and spend summed over the run's stored episodes."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) AS episodes,"
                " TOTAL(json_extract(record, '$.metrics.llm_calls')) AS calls,"
                " TOTAL(json_extract(record, '$.metrics.llm_tokens')) AS tokens,"
                " TOTAL(json_extract(record, '$.metrics.llm_cost_usd')) AS cost_usd,"
                " TOTAL(json_extract(record, '$.metrics.llm_cached_calls')) AS cached_calls"
                " FROM episodes WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        return dict(row)

    def episodes(
        self,
        run_id: str,
        phase: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        episode_ids: Iterable[str] | None = None,
    ) -> list[EpisodeRecord]:
        """Episodes in (phase, index) order, optionally one phase, a page, or chosen ids."""
        if episode_ids is not None:
            return self._episodes_by_id(run_id, list(episode_ids))
        query, args = "SELECT record FROM episodes WHERE run_id = ?", [run_id]
        if phase is not None:
            query, args = query + " AND phase = ?", [*args, phase]
        query += " ORDER BY phase, idx LIMIT ? OFFSET ?"
        args += [-1 if limit is None else limit, offset]
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
        return [EpisodeRecord.from_json(row["record"]) for row in rows]

    def _episodes_by_id(self, run_id: str, wanted: list[str]) -> list[EpisodeRecord]:
        rows: list[sqlite3.Row] = []
        with self._lock:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows += self._db.execute(
                    "SELECT phase, idx, record FROM episodes"
                    f" WHERE run_id = ? AND episode_id IN ({marks})",
                    (run_id, *chunk),
                ).fetchall()
        rows.sort(key=lambda row: (row["phase"], row["idx"]))
        return [EpisodeRecord.from_json(row["record"]) for row in rows]

    # -- experiments --------------------------------------------------------------------
    def create_experiment(
        self,
        experiment_id: str,
        name: str,
        spec: dict[str, Any],
        out_dir: str | Path,
        planned: list[dict[str, Any]],
    ) -> None:
        """The experiment and its planned runs, in one transaction (all or nothing)."""
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO experiments (experiment_id, name, spec, status, out_dir, created,"
                " updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (experiment_id, name, json.dumps(spec), PENDING, str(out_dir), now, now),
            )
            db.executemany(INSERT_EXPERIMENT_RUN, _experiment_run_rows(experiment_id, planned))

    def replan_experiment(
        self, experiment_id: str, spec: dict[str, Any], planned: list[dict[str, Any]]
    ) -> None:
        """Replace the experiment's spec and planned runs (a sweep grown by seeds or grid
        values); the runs' own rows are untouched."""
        with self._tx() as db:
            db.execute(
                "UPDATE experiments SET spec = ?, updated = ? WHERE experiment_id = ?",
                (json.dumps(spec), time.time(), experiment_id),
            )
            db.execute("DELETE FROM experiment_runs WHERE experiment_id = ?", (experiment_id,))
            db.executemany(INSERT_EXPERIMENT_RUN, _experiment_run_rows(experiment_id, planned))

    def get_experiment(self, experiment_id: str) -> ExperimentRow | None:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM experiments WHERE experiment_id = ?", (experiment_id,)
            ).fetchone()
            runs = self._db.execute(
                "SELECT * FROM experiment_runs WHERE experiment_id = ? ORDER BY idx",
                (experiment_id,),
            ).fetchall()
        if row is None:
            return None
        experiment = _experiment_from_row(row)
        experiment.runs = [
            {
                "run_id": run["run_id"],
                "recipe": run["recipe"],
                "config": json.loads(run["config"]),
                "point": json.loads(run["point"]),
                "seed": run["seed"],
            }
            for run in runs
        ]
        return experiment

    def list_experiments(self, status: str | None = None) -> list[ExperimentRow]:
        """Experiments without their runs (get_experiment has them)."""
        query, args = "SELECT * FROM experiments", ()
        if status is not None:
            query, args = query + " WHERE status = ?", (status,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created", args).fetchall()
        return [_experiment_from_row(row) for row in rows]

    def update_experiment(self, experiment_id: str, **fields: Any) -> None:
        unknown = set(fields) - {"status", "cancel_requested"}
        if unknown:
            raise ValueError(f"cannot update experiment fields {sorted(unknown)}")
        if "cancel_requested" in fields:
            fields["cancel_requested"] = int(bool(fields["cancel_requested"]))
        columns = ", ".join(f"{name} = ?" for name in fields)
        with self._tx() as db:
            db.execute(
                f"UPDATE experiments SET {columns}, updated = ? WHERE experiment_id = ?",
                (*fields.values(), time.time(), experiment_id),
            )

    # -- catalog: runs and experiments whose own store lies elsewhere (embedded runs) ------
    def catalog_add(
        self, entry_id: str, kind: str, recipe: str, store: str | Path, out_dir: str | Path
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO catalog (entry_id, kind, recipe, store, out_dir, created)"
                " VALUES (?, ?, ?, ?, ?, COALESCE((SELECT created FROM catalog"
                " WHERE entry_id = ?), ?))",
                (entry_id, kind, recipe, str(store), str(out_dir), entry_id, time.time()),
            )

    def catalog(self, kind: str | None = None) -> list[dict[str, Any]]:
        query, args = "SELECT * FROM catalog", ()
        if kind is not None:
            query, args = query + " WHERE kind = ?", (kind,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created", args).fetchall()
        return [dict(row) for row in rows]

    # -- artifacts ----------------------------------------------------------------------
    def add_artifact(self, run_id: str, name: str, path: str | Path, kind: str = "file") -> None:
        path = Path(path)
        size = path.stat().st_size if path.exists() else 0
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO artifacts (run_id, name, path, kind, size, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, name, str(path), kind, size, time.time()),
            )

    def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, path, kind, size, created FROM artifacts WHERE run_id = ?"
                " ORDER BY name",
                (run_id,),
            ).fetchall()
        return [dict(row) for row in rows]


def _run_from_row(row: sqlite3.Row) -> RunRow:
    return RunRow(
        run_id=row["run_id"],
        recipe=row["recipe"],
        config=json.loads(row["config"]),
        status=row["status"],
        current_phase=row["current_phase"],
        error=row["error"],
        summary=json.loads(row["summary"]),
        out_dir=row["out_dir"],
        cancel_requested=bool(row["cancel_requested"]),
        created=row["created"],
        updated=row["updated"],
        tenant=row["tenant"],
        numerics=json.loads(row["numerics"]),
    )


INSERT_EXPERIMENT_RUN = (
    "INSERT INTO experiment_runs (experiment_id, idx, run_id, recipe, config, point, seed)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def _experiment_run_rows(experiment_id: str, planned: list[dict[str, Any]]) -> list[tuple]:
    return [
        (
            experiment_id,
            index,
            run["run_id"],
            run["recipe"],
            json.dumps(run["config"]),
            json.dumps(run["point"]),
            run["seed"],
        )
        for index, run in enumerate(planned)
    ]


def _experiment_from_row(row: sqlite3.Row) -> ExperimentRow:
    return ExperimentRow(
        experiment_id=row["experiment_id"],
        name=row["name"],
        spec=json.loads(row["spec"]),
        status=row["status"],
        cancel_requested=bool(row["cancel_requested"]),
        out_dir=row["out_dir"],
        created=row["created"],
        updated=row["updated"],
    )
