"""The orchestrator's experiments: their runs start as others finish, `max_parallel` at once.

An experiment's planned runs are stored when it is submitted; a run gets its run row (and
its thread in the RunManager, its episodes on the Redis queue) only when the scheduler
starts it. Everything is in the run store, so a restarted orchestrator carries on: the
RunManager resumes the runs that were running and the scheduler starts the queued ones as
slots free up. When no run is left to start or running, the experiment ends (completed,
failed when a run did not complete, or cancelled) and its report is written to
`<home>/experiments/<id>/` (llmrl.orchestrator.compare).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import traceback
from pathlib import Path
from typing import Any

from llmrl.common import store as states
from llmrl.common.logs import log_event
from llmrl.common.server_paths import redact_server_paths
from llmrl.common.store import ExperimentRow, RunRow
from llmrl.orchestrator.compare import build_report
from llmrl.orchestrator.experiments import (
    ExperimentSpec,
    new_experiment_id,
    plan_experiment,
)
from llmrl.orchestrator.limits import AtCapacity
from llmrl.orchestrator.manager import RunManager, RunNotActive
from llmrl.orchestrator.sources import experiment_runs

log = logging.getLogger("llmrl.orchestrator")
QUEUED = "queued"  # a planned run that has not started (it has no run row yet)
POLL_S = 1.0  # the scheduler also wakes at once when a run ends


class ExperimentNotFound(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class ExperimentScheduler:
    def __init__(self, manager: RunManager) -> None:
        self.manager, self.store = manager, manager.store
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.RLock()  # one decision at a time: cancel never races a start
        self._thread: threading.Thread | None = None
        manager.run_end_hooks.append(lambda _run_id: self._wake.set())

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="experiments", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.tick()
            except Exception as exc:  # the store briefly unavailable: try again next tick
                log_event(log, "experiment scheduling failed", logging.ERROR, error=str(exc))
            self._wake.wait(POLL_S)
            self._wake.clear()

    # -- experiments ------------------------------------------------------------------------
    def submit(self, spec: ExperimentSpec) -> ExperimentRow:
        """Plan and store the experiment (ConfigError, and nothing stored, if anything is bad)."""
        experiment_id = new_experiment_id(spec)
        planned = plan_experiment(spec, experiment_id)
        out_dir = self.manager.home / "experiments" / experiment_id
        self.store.create_experiment(
            experiment_id,
            spec.name or spec.default_name(),
            spec.model_dump(mode="json"),
            out_dir,
            [run.to_dict() for run in planned],
        )
        log_event(log, "experiment submitted", experiment_id=experiment_id, runs=len(planned))
        self._wake.set()
        return self.get(experiment_id)

    def get(self, experiment_id: str) -> ExperimentRow:
        experiment = self.store.get_experiment(experiment_id)
        if experiment is None:
            raise ExperimentNotFound(f"unknown experiment id {experiment_id!r}")
        return experiment

    def cancel(self, experiment_id: str) -> ExperimentRow:
        """No further run starts; the running ones are cancelled."""
        with self._lock:
            experiment = self.get(experiment_id)
            if experiment.status not in states.ACTIVE_STATES:
                raise RunNotActive(
                    f"experiment {experiment_id} has already ended ({experiment.status})"
                )
            self.store.update_experiment(experiment_id, cancel_requested=True)
            for run in self._run_rows(experiment):
                if run is not None and run.status in states.ACTIVE_STATES:
                    with contextlib.suppress(RunNotActive):  # it ended meanwhile
                        self.manager.cancel(run.run_id)
        self._wake.set()
        return self.get(experiment_id)

    def tick(self) -> None:
        """Start queued runs where slots are free; end experiments with nothing left."""
        if self._stopping.is_set():
            return
        with self._lock:
            for experiment in self.store.list_experiments():
                if experiment.status in states.ACTIVE_STATES:
                    self._advance(self.get(experiment.experiment_id))

    def _run_rows(self, experiment: ExperimentRow) -> list[RunRow | None]:
        return [self.store.get_run(run["run_id"], with_phases=False) for run in experiment.runs]

    def _advance(self, experiment: ExperimentRow) -> None:
        rows = self._run_rows(experiment)
        active = sum(1 for row in rows if row is not None and row.status in states.ACTIVE_STATES)
        queued = [run for run, row in zip(experiment.runs, rows, strict=True) if row is None]
        if experiment.cancel_requested:
            queued = []
        free = int(experiment.spec.get("max_parallel", 1)) - active
        for run in queued[: max(free, 0)]:
            if self._stopping.is_set():
                return
            try:
                active += self._start(experiment, run)
            except AtCapacity:  # the orchestrator is full: the run stays queued till one ends
                break
        if experiment.status == states.PENDING and active:
            self.store.update_experiment(experiment.experiment_id, status=states.RUNNING)
        if active or (queued and not experiment.cancel_requested):
            return
        rows = self._run_rows(experiment)
        if experiment.cancel_requested:
            final = states.CANCELLED
        elif all(row is not None and row.status == states.COMPLETED for row in rows):
            final = states.COMPLETED
        else:
            final = states.FAILED
        self._report(experiment, final)
        self.store.update_experiment(experiment.experiment_id, status=final)
        log_event(log, "experiment ended", experiment_id=experiment.experiment_id, status=final)

    def _start(self, experiment: ExperimentRow, run: dict[str, Any]) -> int:
        """Start one planned run; 1 if it runs, 0 if it failed to start (it is marked failed);
        AtCapacity (nothing stored) when the orchestrator's limits leave no room for it."""
        try:
            self.manager.submit(run["recipe"], run["config"], run_id=run["run_id"])
            return 1
        except AtCapacity:
            raise
        except Exception as exc:  # e.g. a plugin gone since submission: fail this run only
            if self.store.get_run(run["run_id"], with_phases=False) is None:
                out_dir = self.manager.home / "runs" / run["run_id"]
                self.store.create_run(run["recipe"], run["config"], out_dir, run["run_id"])
            error = f"could not start: {type(exc).__name__}: {exc}"
            self.store.update_run(run["run_id"], status=states.FAILED, error=error)
            log_event(
                log,
                "experiment run failed to start",
                logging.ERROR,
                experiment_id=experiment.experiment_id,
                run_id=run["run_id"],
                error=error,
            )
            return 0

    def _report(self, experiment: ExperimentRow, final: str) -> None:
        notes = [] if final == states.COMPLETED else [f"the experiment ended {final}"]
        try:
            build_report(
                experiment_runs(self.store, experiment.experiment_id),
                Path(experiment.out_dir),
                f"experiment {experiment.experiment_id}",
                notes,
            )
        except Exception as exc:  # a report that cannot be built must not stall the scheduler
            log_event(
                log,
                "experiment report failed",
                logging.ERROR,
                experiment_id=experiment.experiment_id,
                error=str(exc),
                trace=traceback.format_exc(limit=8),
            )

    # -- views ------------------------------------------------------------------------------
    def view(self, experiment: ExperimentRow, full: bool = True) -> dict[str, Any]:
        rows = self._run_rows(experiment)
        states_of = [row.status if row is not None else QUEUED for row in rows]
        counts = {state: states_of.count(state) for state in dict.fromkeys(states_of)}
        view: dict[str, Any] = {
            "experiment_id": experiment.experiment_id,
            "name": experiment.name,
            "status": experiment.status,
            "cancel_requested": experiment.cancel_requested,
            "max_parallel": experiment.spec.get("max_parallel"),
            "runs_total": len(experiment.runs),
            "run_states": counts,
            "created": experiment.created,
            "updated": experiment.updated,
        }
        if not full:
            return view
        view["spec"] = experiment.spec
        view["runs"] = [
            {
                "run_id": run["run_id"],
                "recipe": run["recipe"],
                "point": run["point"],
                "seed": run["seed"],
                "config": run["config"],
                "status": state,
                "current_phase": row.current_phase if row is not None else None,
                # why a run failed, as GET /runs/{id} says it: a sweep following the
                # experiment shows it without asking for each run
                "error": redact_server_paths(row.error) if row is not None and row.error else None,
                "summary": row.summary if row is not None else {},
            }
            for run, row, state in zip(experiment.runs, rows, states_of, strict=True)
        ]
        view["aggregate"] = self.report(experiment)
        return view

    def report(self, experiment: ExperimentRow) -> dict[str, Any] | None:
        """The report's results.json once the experiment has ended (None before)."""
        path = Path(experiment.out_dir) / "results.json"
        if experiment.status in states.ACTIVE_STATES or not path.is_file():
            return None
        return json.loads(path.read_text())

    def report_file(self, experiment: ExperimentRow, name: str) -> Path | None:
        """A file of the report (results.md/json, a plot), looked up by name, never joined."""
        report = self.report(experiment)
        if report is None:
            return None
        allowed = {"results.json", "results.md", *report.get("plots", [])}
        path = Path(experiment.out_dir) / name
        return path if name in allowed and path.is_file() else None
