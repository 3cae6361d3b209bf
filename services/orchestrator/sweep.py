"""`llmrl sweep`: an experiment in embedded mode, one run after another, resumable.

Everything lives in the sweep's out dir (default `runs/<experiment name>`): one run store
(`run.sqlite`, with the experiment and all its runs), each run's files under
`runs/<run_id>/`, and the experiment's report (results.md, results.json, plots). The
experiment's id is its name (default: the recipe and a digest of the spec), and its run ids
derive from it, so the same sweep into the same out dir again skips the completed runs,
resumes an interrupted one where it stopped, and retries failed or cancelled ones, each only
under the numerics it started with (`llmrl.orchestrator.same_numerics`). Under the
same `--name`, a sweep with more seeds or grid values (the rest unchanged) grows the
experiment: its completed runs are kept and only the new ones run.

`jobs` > 1 runs that many runs at once, each in a process of its own (spawned: a run's torch
and simulator state never cross), all writing to the one run store (SQLite in WAL mode takes
writers from several processes). A run's results do not depend on what runs beside it; on a
machine with N cores, N jobs finish a sweep of N-run batches about N times sooner.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from rich.console import Console

from llmrl.agents import RolloutResources
from llmrl.common import catalog
from llmrl.common import store as states
from llmrl.common.console import output_console
from llmrl.common.numerics import numerics_provenance
from llmrl.common.paths import allow_root
from llmrl.common.plugins import load_plugins
from llmrl.common.store import RunRow, RunStore
from llmrl.orchestrator.compare import build_report, print_report
from llmrl.orchestrator.executors import embedded_executor
from llmrl.orchestrator.experiments import ExperimentSpec, PlannedRun, plan_experiment
from llmrl.orchestrator.runner import execute_run
from llmrl.orchestrator.same_numerics import check_same_numerics
from llmrl.orchestrator.sources import STORE_FILE, experiment_runs
from llmrl.recipes.config import ConfigError
from llmrl.recipes.progress import make_progress


def run_sweep(
    spec: ExperimentSpec,
    out_dir: str | Path | None = None,
    console: Console | None = None,
    progress: bool = True,
    jobs: int = 1,
    gateway: dict[str, Any] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Run (or resume) the experiment, `jobs` runs at once; returns its report. ConfigError
    for a bad spec. `gateway`: the in-process gateway's settings (an experiment file's), unless
    $LLMRL_LLM_GATEWAY_CONFIG names a config already; `threads`: torch threads of every run."""
    if jobs < 1:
        raise ConfigError(
            f"jobs: runs at once must be at least 1, got {jobs}",
            [{"loc": ["jobs"], "msg": "must be at least 1"}],
        )
    console = console or output_console()
    load_plugins()
    experiment_id = spec.name or spec.default_name()
    planned = plan_experiment(spec, experiment_id)  # everything validated before anything runs
    out = Path(out_dir or Path("runs") / experiment_id).resolve()
    out.mkdir(parents=True, exist_ok=True)
    allow_root(out)  # the runs' own models and datasets live here (the user chose it)
    if gateway:
        use_gateway_settings(out, gateway)
    if threads:
        use_threads(threads)
    else:
        _say_threads_unstated(console)
    store = RunStore(out / STORE_FILE)
    resources = RolloutResources(simulator=None, llm_gateway=None)
    try:
        _create_or_check(store, spec, experiment_id, planned, out, console)
        catalog.record(experiment_id, catalog.EXPERIMENT, "+".join(spec.recipes()), store.path, out)
        store.update_experiment(experiment_id, status=states.RUNNING)
        console.print(f"experiment {experiment_id}: {len(planned)} runs, files in {out}")
        if jobs == 1:
            for index, run in enumerate(planned, 1):
                _run_one(store, resources, run, out, console, f"[{index}/{len(planned)}]", progress)
        else:
            _run_in_processes(store, planned, out, console, jobs, progress)
        rows = [store.get_run(run.run_id, with_phases=False) for run in planned]
        failed = [row.run_id for row in rows if row is None or row.status != states.COMPLETED]
        store.update_experiment(experiment_id, status=states.FAILED if failed else states.COMPLETED)
        notes = [f"runs that did not complete: {', '.join(failed)}"] if failed else []
        report = build_report(
            experiment_runs(store, experiment_id), out, f"experiment {experiment_id}", notes
        )
    finally:
        resources.close()
        store.close()
    print_report(console, report)
    console.print(f"report: {out / 'results.md'}")
    return report


def use_threads(threads: int) -> None:
    """torch on `threads` threads in this process and in the runs it spawns (which read
    OMP_NUM_THREADS when torch loads). torch's count is set only where it differs: setting it
    is no no-op (torch then sets MKL's count for the calling thread and turns MKL's dynamic
    threading off), and on a 2-core Intel Xeon (2026-12-06) setting a count equal to the
    default gave GLAM's first run in the process other answers from its trained adapter than
    the same run unstated, with --jobs 2 or under `llmrl up` (tests/orchestrator/
    test_same_bits.py); which of those settings does it is not established."""
    import os

    import torch

    os.environ["OMP_NUM_THREADS"] = str(threads)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _say_threads_unstated(console: Console) -> None:
    """A sweep that states no thread count computes on this machine's: say which, and how to
    state it (a seeded figure can depend on the count, so another machine may not repeat it)."""
    from llmrl.common.threads import stated_thread_count

    console.print(
        f"threads: not stated, so every run computes on {stated_thread_count()} torch threads "
        "($OMP_NUM_THREADS, else this machine's cores); a seeded run's figures can depend on "
        "the count, so give `threads:` in the experiment file (or --threads) to repeat them "
        "on a machine with other cores"
    )


def use_gateway_settings(out: Path, settings: dict[str, Any]) -> None:
    """Write `settings` to `out/gateway.yaml` and point $LLMRL_LLM_GATEWAY_CONFIG at it (for
    this process and the runs it spawns), unless the variable names a config already."""
    import os

    import yaml

    from llmrl.llm_gateway.settings import CONFIG_ENV_VAR

    if os.environ.get(CONFIG_ENV_VAR):
        return
    from llmrl.common.safe_write import write_text

    path = out / "gateway.yaml"
    write_text(path, yaml.safe_dump(settings))  # through no link planted at the name
    os.environ[CONFIG_ENV_VAR] = str(path)


def _create_or_check(
    store: RunStore,
    spec: ExperimentSpec,
    experiment_id: str,
    planned: list[PlannedRun],
    out: Path,
    console: Console,
) -> None:
    """Create the experiment, or check the stored one of this id: the same runs, or runs that
    are all in the new plan unchanged, to which it grows (more seeds or grid values: only the
    new runs run)."""
    here = numerics_provenance()
    for run in planned:  # before anything runs: none is taken up under other numerics
        row = store.get_run(run.run_id, with_phases=False)
        if row is not None:
            check_same_numerics(row, out, f"llmrl sweep ... --out {out}", here)
    existing = store.get_experiment(experiment_id)
    plan = [run.to_dict() for run in planned]
    if existing is None:
        store.create_experiment(
            experiment_id, experiment_id, spec.model_dump(mode="json"), out, plan
        )
        return
    if existing.runs == plan:
        return
    new = {run["run_id"]: run for run in plan}
    if all(new.get(run["run_id"]) == run for run in existing.runs):
        store.replan_experiment(experiment_id, spec.model_dump(mode="json"), plan)
        added = len(plan) - len(existing.runs)
        console.print(f"experiment {experiment_id} grows by {added} runs")
        return
    raise ConfigError(
        f"name: {out} already holds an experiment {experiment_id!r} with other runs; "
        "give another --name or --out to start a new one",
        [{"loc": ["name"], "msg": "an experiment of this name with other runs exists"}],
    )


def _run_in_processes(
    store: RunStore,
    planned: list[PlannedRun],
    out: Path,
    console: Console,
    jobs: int,
    progress: bool,
) -> None:
    """The runs not yet completed, `jobs` at a time, each in a spawned process."""
    todo = []
    for index, run in enumerate(planned, 1):
        counter = f"[{index}/{len(planned)}]"
        if not _completed_earlier(
            store.get_run(run.run_id, with_phases=False), run, console, counter
        ):
            todo.append((run, counter))
    if not todo:
        return
    console.print(f"{len(todo)} runs, {min(jobs, len(todo))} at once, each in its own process")
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context) as pool:
        futures = [
            pool.submit(_run_in_worker, str(store.path), run.to_dict(), str(out), counter, progress)
            for run, counter in todo
        ]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except KeyboardInterrupt:  # the workers got the Ctrl-C too; their runs resume later
            for future in futures:
                future.cancel()
            raise
        error = next((f.exception() for f in done if f.exception() is not None), None)
        if error is not None:  # a worker died: the queued runs are dropped, the running finish
            for future in futures:
                future.cancel()
            raise error


def _run_in_worker(
    store_path: str, run: dict[str, Any], out: str, counter: str, progress: bool
) -> None:
    """One run in a worker process: its own store connection and in-process services; progress
    as lines (bars from several processes would overwrite each other)."""
    load_plugins()
    allow_root(out)  # as in the parent: the runs' own files are under the sweep's out dir
    store = RunStore(Path(store_path))
    resources = RolloutResources(simulator=None, llm_gateway=None)
    console = output_console(terminal=False)
    try:
        _run_one(store, resources, PlannedRun(**run), Path(out), console, counter, progress)
    finally:
        resources.close()
        store.close()


def _run_one(
    store: RunStore,
    resources: RolloutResources,
    run: PlannedRun,
    out: Path,
    console: Console,
    counter: str,
    progress: bool,
) -> None:
    row = store.get_run(run.run_id, with_phases=False)
    if _completed_earlier(row, run, console, counter):
        return
    if row is None:
        store.create_run(
            run.recipe,
            run.config,
            out / "runs" / run.run_id,
            run_id=run.run_id,
            numerics=numerics_provenance(),
        )
    elif row.status in (states.FAILED, states.CANCELLED):  # retried: its completed phases stay
        store.update_run(run.run_id, status=states.PENDING, error=None, cancel_requested=False)
    catalog.record(run.run_id, catalog.RUN, run.recipe, store.path, out / "runs" / run.run_id)
    console.print(f"{counter} {_label(run)} seed {run.seed}: run {run.run_id}")
    reporter = make_progress(console, progress)
    final = execute_run(store, run.run_id, embedded_executor(store, resources), progress=reporter)
    if final.status != states.COMPLETED:
        console.print(f"[red]{counter} run {run.run_id} {final.status}: {final.error or ''}")


def _label(run: PlannedRun) -> str:
    return ", ".join(f"{k}={v}" for k, v in run.point.items()) or run.recipe


def _completed_earlier(row: RunRow | None, run: PlannedRun, console: Console, counter: str) -> bool:
    """Whether the stored `row` of `run` is completed (then said, and the run skipped)."""
    if row is None or row.status != states.COMPLETED:
        return False
    console.print(f"{counter} {_label(run)} seed {run.seed}: completed earlier, skipped")
    return True
