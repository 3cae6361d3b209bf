"""`llmrl run`: one run in embedded mode (in-process worlds, gateway and queue; SQLite store).

The run store lives in the out dir (`<out>/run.sqlite`): running the same recipe with the same
config into the same out dir again resumes an unfinished run (completed phases and stored
episodes are kept) or, when the last run there completed, starts a fresh one. A run is taken up
only under the numerics it started with (`llmrl.orchestrator.same_numerics`).

What it prints: a progress bar per phase (on a terminal; in a log or a pipe a line now and
then), the results table (whole, whatever the width), and the run's LLM use from the gateway's
ledger: calls, how many the cache served, tokens and cost.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from llmrl.agents import RolloutResources
from llmrl.common import catalog
from llmrl.common import store as states
from llmrl.common.console import output_console, quiet_library_progress_bars
from llmrl.common.numerics import numerics_provenance
from llmrl.common.paths import allow_root
from llmrl.common.plugins import load_plugins
from llmrl.common.store import RunRow, RunStore
from llmrl.orchestrator.executors import embedded_executor
from llmrl.orchestrator.runner import execute_run
from llmrl.orchestrator.same_numerics import check_same_numerics
from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.progress import clock_time, make_progress
from llmrl.recipes.results import Results, format_cell, read_results
from llmrl.recipes.tracking import identity


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


class RunFailed(RuntimeError):
    """An embedded run ended failed or cancelled; `error` is what its failing phase raised."""

    def __init__(self, run_id: str, status: str, error: str | None, out: Path) -> None:
        super().__init__(f"run {run_id} {status}: {error}")
        self.run_id, self.status, self.error, self.out = run_id, status, error, out


def _same_settings(run: RunRow, recipe: str, config: dict[str, Any]) -> bool:
    """Whether a stored run has this recipe and validated config. A run stored before a
    config key was added lacks it: read with today's schema it has the key's default, which
    leaves the behaviour it ran with unchanged, so it still matches."""
    if run.recipe != recipe:
        return False
    if identity(run.config) == identity(config):  # tracking elsewhere: the same run
        return True
    try:
        stored = validate_config(recipe, run.config).model_dump(mode="json")
        return identity(stored) == identity(config)
    except ConfigError:  # a config today's schema refuses (a key since removed): not the same
        return False


def _find_resumable(store: RunStore, recipe: str, config: dict[str, Any]) -> RunRow | None:
    for run in reversed(store.list_runs()):
        if run.status in states.ACTIVE_STATES and _same_settings(run, recipe, config):
            return run
    return None


def _find_completed(store: RunStore, recipe: str, config: dict[str, Any]) -> RunRow | None:
    """The out dir's latest run, when it completed with this recipe and config: its
    results.json is that run's (an older matching run's results may have been overwritten)."""
    runs = store.list_runs()
    latest = runs[-1] if runs else None
    if latest is None or latest.status != states.COMPLETED:
        return None
    return latest if _same_settings(latest, recipe, config) else None


def run_embedded(
    recipe: str,
    config: dict[str, Any],
    out_dir: str | Path | None = None,
    progress: bool = True,
    console: Console | None = None,
    reuse_completed: bool = False,
) -> RunRow:
    """Run `recipe` with `config` in this process; prints and writes its results.

    With `reuse_completed`, a run that already completed in `out_dir` with the same recipe and
    (validated) config, as the dir's latest run, is returned as it is instead of run again (as
    `llmrl sweep` skips completed runs). Raises `llmrl.recipes.config.ConfigError` for an
    unknown recipe or a bad config.
    """
    console = console or output_console()
    quiet_library_progress_bars()
    started = time.monotonic()
    load_plugins()
    validated = validate_config(recipe, config)
    canonical = validated.model_dump(mode="json")
    out = Path(out_dir or f"runs/{recipe}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    allow_root(out)  # the run's own datasets and jobs live here (the user chose it)
    store = RunStore(out / "run.sqlite")
    resources = RolloutResources(simulator=None, llm_gateway=None)
    try:
        done = _find_completed(store, recipe, canonical) if reuse_completed else None
        if done is not None:
            check_same_numerics(done, out, f"llmrl run {recipe} ... --out {out}")
            console.print(f"finished with these settings earlier: run {done.run_id} in {out}")
            return done
        previous = _find_resumable(store, recipe, canonical)
        if previous is not None:
            check_same_numerics(previous, out, f"llmrl run {recipe} ... --out {out}")
            run_id = previous.run_id
            console.print(f"resuming run {run_id} in {out}")
        else:
            run_id = store.create_run(recipe, canonical, out, numerics=numerics_provenance())
            console.print(f"run {run_id}: files in {out}")
        catalog.record(run_id, catalog.RUN, recipe, store.path, out)  # `llmrl runs` lists it
        reporter = make_progress(console, progress)
        run = execute_run(store, run_id, embedded_executor(store, resources), progress=reporter)
    finally:
        resources.close()
        store.close()
    if run.status != states.COMPLETED:
        raise RunFailed(run.run_id, run.status, run.error, out)
    results = read_results(out)
    if results is not None:
        console.print(results_table(results))
        for note in results.notes:
            console.print(f"  {note}")
    usage = gateway_usage(run.run_id)
    if usage is not None:
        console.print(llm_summary(usage))
    elapsed = clock_time(time.monotonic() - started)
    console.print(f"done in {elapsed}; results, plots and episode logs in {out}")
    return run


def gateway_usage(run_id: str) -> dict[str, Any] | None:
    """The gateway ledger's totals for the run, or None when no LLM took part in this process.

    Embedded, every LLM client of a run shares this process's gateway, and the gateway client
    module is only imported when something asks for an LLM: without it there is nothing to
    report (and no gateway, with its cache and ledger files, is created just to say so).
    """
    client = sys.modules.get("llmrl.llm_gateway.client")
    if client is None:
        return None
    usage = client.connect().usage(run_id)
    return usage if usage["requests"] or usage["errors"] else None


def llm_summary(usage: dict[str, Any]) -> str:
    """One line: LLM calls, how many the cache served, tokens computed and cost."""
    calls, hits = usage["requests"], usage["cache_hits"]
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    line = (
        f"LLM: {calls} calls through the gateway, {hits} of {calls} served from the cache; "
        f"{prompt + completion:,} tokens computed ({prompt:,} prompt + {completion:,} "
        f"completion); cost ${usage['cost_usd']:.4f}"
    )
    if usage["errors"]:
        line += f"; {usage['errors']} failed"
    return line
