"""`llmrl run`: one run in embedded mode (in-process worlds, gateway and queue; SQLite store).

The run store lives in the out dir (`<out>/run.sqlite`): running the same recipe with the same
config into the same out dir again resumes an unfinished run (completed phases and stored
episodes are kept) or, when the last run there completed, starts a fresh one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from llmrl.agents import RolloutResources
from llmrl.common import store as states
from llmrl.common.plugins import load_plugins
from llmrl.common.store import RunRow, RunStore
from llmrl.orchestrator import catalog
from llmrl.orchestrator.executors import embedded_executor
from llmrl.orchestrator.runner import execute_run
from llmrl.recipes.base import NullProgress, Results, format_cell, read_results, validate_config


class RichProgress(NullProgress):
    """A rich progress bar per phase (also keeps the counts)."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: Any = None

    def start(self, phase: str, total: int, done: int = 0, unit: str = "episodes") -> None:
        super().start(phase, total, done, unit)
        self._bar.start()
        self._task = self._bar.add_task(f"{phase} {unit}", total=total, completed=done)

    def advance(self, n: int = 1) -> None:
        super().advance(n)
        self._bar.advance(self._task, n)

    def finish(self) -> None:
        self._bar.stop()


def results_table(results: Results) -> Table:
    """A few rows: transposed (one line per column), which fits a terminal; more: as is."""
    table = Table(title=results.title)
    columns = results.column_names()
    if len(results.rows) > 3:
        for column in columns:
            table.add_column(column, justify="left" if column in ("task", "method") else "right")
        for row in results.rows:
            table.add_row(*(format_cell(row.get(column)) for column in columns))
        return table
    table.add_column("")
    for index, _ in enumerate(results.rows):
        table.add_column(str(index) if len(results.rows) > 1 else "value", justify="right")
    for column in columns:
        table.add_row(column, *(format_cell(row.get(column)) for row in results.rows))
    return table


def _find_resumable(store: RunStore, recipe: str, config: dict[str, Any]) -> RunRow | None:
    for run in reversed(store.list_runs()):
        if run.recipe == recipe and run.config == config and run.status in states.ACTIVE_STATES:
            return run
    return None


def run_embedded(
    recipe: str,
    config: dict[str, Any],
    out_dir: str | Path | None = None,
    progress: bool = True,
    console: Console | None = None,
) -> RunRow:
    """Run `recipe` with `config` in this process; prints and writes its results.

    Raises `llmrl.recipes.base.ConfigError` for an unknown recipe or a bad config.
    """
    console = console or Console(stderr=False)
    load_plugins()
    validated = validate_config(recipe, config)
    canonical = validated.model_dump(mode="json")
    out = Path(out_dir or f"runs/{recipe}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(out / "run.sqlite")
    resources = RolloutResources(simulator=None, llm_gateway=None)
    try:
        previous = _find_resumable(store, recipe, canonical)
        if previous is not None:
            run_id = previous.run_id
            console.print(f"resuming run {run_id} in {out}")
        else:
            run_id = store.create_run(recipe, canonical, out)
            console.print(f"run {run_id}: files in {out}")
        catalog.record(run_id, catalog.RUN, recipe, store.path, out)  # `llmrl runs` lists it
        reporter = RichProgress(console) if progress else NullProgress()
        run = execute_run(store, run_id, embedded_executor(store, resources), progress=reporter)
    finally:
        resources.close()
        store.close()
    if run.status != states.COMPLETED:
        console.print(f"[red]run {run.run_id} {run.status}: {run.error or ''}")
        raise RuntimeError(f"run {run.run_id} {run.status}: {run.error}")
    results = read_results(out)
    if results is not None:
        console.print(results_table(results))
        for note in results.notes:
            console.print(f"  {note}")
    console.print(f"results, plots and episode logs in {out}")
    return run
