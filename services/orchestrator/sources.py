"""Where `llmrl compare` finds runs: run directories, run stores, the catalog, an orchestrator.

A reference is, in this order: a directory (an embedded run's `--out`, a sweep's `--out`,
or one run's folder inside a sweep), an id in the catalog of embedded runs and sweeps, or
an id in the local orchestrator's store (`$LLMRL_HOME/orchestrator.sqlite`); with `--url`,
a run or experiment id on that orchestrator. Each becomes one or more `RunData`: config,
status, the results table and the learning curves (TensorBoard scalars of `<out>/tb`, or
the stored episodes where there are none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.common import catalog
from llmrl.common.episodes import EpisodeRecord
from llmrl.common.store import RunRow, RunStore
from llmrl.orchestrator.compare import CURVE_TAGS, RunData
from llmrl.recipes.results import Results, read_results

STORE_FILE = "run.sqlite"
EPISODE_PAGE = 1000


class UnknownReference(LookupError):
    def __str__(self) -> str:
        return str(self.args[0])


# -- curves ------------------------------------------------------------------------------------
def read_tensorboard(tb_dir: Path) -> dict[str, np.ndarray]:
    """The curve tags' values in the order they were written (x = 1..n); {} without any."""
    if not tb_dir.is_dir():
        return {}
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:  # tensorboard comes with the [learn] extra: the caller falls back
        return {}
    accumulator = event_accumulator.EventAccumulator(
        str(tb_dir),
        size_guidance={event_accumulator.SCALARS: 0},  # every point, no reservoir sampling
        purge_orphaned_data=False,  # a resumed run restarts its step count: keep both parts
    )
    accumulator.Reload()
    tags = set(accumulator.Tags().get("scalars", []))
    curves = {}
    for tag in CURVE_TAGS:
        if tag in tags:
            events = sorted(accumulator.Scalars(tag), key=lambda event: event.wall_time)
            curves[tag] = np.array([event.value for event in events], dtype=float)
    return curves


def curves_from_episodes(episodes: Iterable[dict[str, Any] | EpisodeRecord]) -> dict[str, Any]:
    returns, successes = [], []
    for episode in episodes:
        data = episode.to_dict() if isinstance(episode, EpisodeRecord) else episode
        returns.append(float(data.get("episode_return", np.nan)))
        successes.append(float(bool(data.get("success"))))
    if not returns:
        return {}
    return dict(zip(CURVE_TAGS, (np.array(returns), np.array(successes)), strict=True))


# -- local stores ------------------------------------------------------------------------------
def from_store(store: RunStore, run: RunRow) -> RunData:
    out = Path(run.out_dir)
    curves = read_tensorboard(out / "tb") or curves_from_episodes(store.episodes(run.run_id))
    return RunData(run.run_id, run.recipe, run.config, run.status, read_results(out), curves)


def experiment_runs(store: RunStore, experiment_id: str) -> list[RunData]:
    """Every planned run of the experiment; one not started yet is 'queued' with no results."""
    experiment = store.get_experiment(experiment_id)
    if experiment is None:
        raise UnknownReference(f"unknown experiment {experiment_id!r} in {store.path}")
    runs = []
    for planned in experiment.runs:
        row = store.get_run(planned["run_id"], with_phases=False)
        if row is None:
            runs.append(RunData(planned["run_id"], planned["recipe"], planned["config"], "queued"))
        else:
            runs.append(from_store(store, row))
    return runs


def _from_store_file(path: Path, run_id: str | None = None, out_dir: Path | None = None):
    store = RunStore(path)
    try:
        if run_id is not None:
            row = store.get_run(run_id, with_phases=False)
            if row is not None:
                return [from_store(store, row)], f"run {run_id}"
            if store.get_experiment(run_id) is not None:
                return experiment_runs(store, run_id), f"experiment {run_id}"
            raise UnknownReference(f"no run or experiment {run_id!r} in {path}")
        experiments = store.list_experiments()
        if experiments:
            runs = [r for e in experiments for r in experiment_runs(store, e.experiment_id)]
            names = ", ".join(e.experiment_id for e in experiments)
            return runs, f"experiment {names}"
        mine = [r for r in store.list_runs() if out_dir is None or Path(r.out_dir) == out_dir]
        if not mine:
            raise UnknownReference(f"no runs in {path}")
        completed = [r for r in mine if r.status == "completed"]
        latest = (completed or mine)[-1]
        return [from_store(store, latest)], f"run {latest.run_id}"
    finally:
        store.close()


def resolve_local(reference: str) -> tuple[list[RunData], str]:
    """The runs a directory or id names, and a title for them."""
    path = Path(reference)
    if path.is_dir():
        path = path.resolve()
        if (path / STORE_FILE).exists():
            return _from_store_file(path / STORE_FILE, out_dir=path)
        sweep_store = path.parent.parent / STORE_FILE  # <sweep out>/runs/<run_id>
        if sweep_store.exists():
            return _from_store_file(sweep_store, run_id=path.name)
        raise UnknownReference(f"{reference}: no {STORE_FILE} here: not a run or sweep directory")
    entry = catalog.find(reference)
    if entry is not None:
        return _from_store_file(Path(entry["store"]), run_id=reference)
    orchestrator_store = catalog.orchestrator_store_path()
    if orchestrator_store is not None:
        try:
            return _from_store_file(orchestrator_store, run_id=reference)
        except UnknownReference:
            pass
    raise UnknownReference(
        f"{reference!r} is neither a run or sweep directory nor a run or experiment id in "
        f"{catalog.catalog_path()} or the local orchestrator's store (for runs on an "
        "orchestrator elsewhere, give --url)"
    )


def resolve_run(reference: str) -> tuple[RunRow, bool]:
    """The one run `reference` names, as `resolve_local` reads references (an embedded run's
    out dir or a sweep's run folder, an embedded run's id, a run id in the local
    orchestrator's store), and whether it ran on the services (the orchestrator's)."""
    path = Path(reference)
    if path.is_dir():
        path = path.resolve()
        if (path / STORE_FILE).exists():
            store = RunStore(path / STORE_FILE)
            try:
                mine = [r for r in store.list_runs() if Path(r.out_dir) == path]
            finally:
                store.close()
            if not mine:
                raise UnknownReference(
                    f"{reference}: no run of its own here (a sweep's directory? name one of its "
                    "runs: DIR/runs/<run_id>)"
                )
            completed = [r for r in mine if r.status == "completed"]
            return (completed or mine)[-1], False
        sweep_store = path.parent.parent / STORE_FILE  # <sweep out>/runs/<run_id>
        if sweep_store.exists():
            return _run_in(sweep_store, path.name), False
        raise UnknownReference(f"{reference}: no {STORE_FILE} here: not a run directory")
    entry = catalog.find(reference)
    if entry is not None:
        if entry["kind"] != catalog.RUN:
            raise UnknownReference(f"{reference!r} is an experiment: name one of its runs")
        return _run_in(Path(entry["store"]), reference), False
    orchestrator_store = catalog.orchestrator_store_path()
    if orchestrator_store is not None:
        try:
            return _run_in(orchestrator_store, reference), True
        except UnknownReference:
            pass
    raise UnknownReference(
        f"{reference!r} is neither a run directory nor a run id in {catalog.catalog_path()} "
        "or the local orchestrator's store (`llmrl runs` lists them)"
    )


def _run_in(path: Path, run_id: str) -> RunRow:
    store = RunStore(path)
    try:
        row = store.get_run(run_id, with_phases=False)
    finally:
        store.close()
    if row is None:
        raise UnknownReference(f"no run {run_id!r} in {path}")
    return row


# -- an orchestrator ---------------------------------------------------------------------------
def resolve_remote(client: Any, reference: str) -> tuple[list[RunData], str]:
    """A run or experiment id on the orchestrator behind `client` (an OrchestratorClient)."""
    from llmrl.orchestrator.rest_client import OrchestratorError

    try:
        experiment = client.experiment(reference)
    except OrchestratorError as exc:
        if exc.status != 404:
            raise
    else:
        return [remote_run(client, run) for run in experiment["runs"]], f"experiment {reference}"
    try:
        return [remote_run(client, client.run(reference))], f"run {reference}"
    except OrchestratorError as exc:
        if exc.status == 404:
            raise UnknownReference(
                f"no run or experiment {reference!r} on the orchestrator"
            ) from None
        raise


def remote_run(client: Any, run: dict[str, Any]) -> RunData:
    """A run from the REST API: its view, results.json artifact and stored episodes."""
    if run.get("status") in (None, "queued"):  # an experiment's run that has not started
        return RunData(run["run_id"], run["recipe"], run.get("config") or {}, "queued")
    if "config" not in run:
        run = client.run(run["run_id"])
    results = None
    if run["status"] == "completed":
        results = Results.from_dict(json.loads(client.artifact(run["run_id"], "results.json")))
    episodes: list[dict[str, Any]] = []
    while True:
        page = client.episodes(run["run_id"], offset=len(episodes), limit=EPISODE_PAGE)
        episodes += page["episodes"]
        if not page["episodes"] or len(episodes) >= page["total"]:
            break
    return RunData(
        run["run_id"],
        run["recipe"],
        run["config"],
        run["status"],
        results,
        curves_from_episodes(episodes),
    )
