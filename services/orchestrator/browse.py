"""`llmrl runs` and `llmrl tensorboard`: what has been run, and one place to look at it.

`llmrl runs` lists the embedded runs in the catalog ($LLMRL_HOME/embedded.sqlite, each read
from its own store) and the local orchestrator's runs, or with `--url` an orchestrator's:
recipe, status, the config keys that differ from the recipe's defaults, a headline metric
and the LLM spend. Every run's TensorBoard scalars are reachable under one root,
`$LLMRL_HOME/tensorboard/<run_id>` (llmrl.recipes.context.link_tensorboard).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from llmrl.common import catalog
from llmrl.common.console import output_console
from llmrl.common.store import RunRow, RunStore
from llmrl.recipes.config import ConfigError, recipe_class
from llmrl.recipes.results import format_cell

COLUMNS = ("run_id", "mode", "recipe", "status", "key config", "headline", "LLM spend")
MAX_VALUE_CHARS = 40
PREFERRED_METRICS = ("success_rate", "success", "mean_return", "return")


# -- what a row shows -------------------------------------------------------------------------
def key_config(recipe: str, config: dict[str, Any]) -> str:
    """`key=value` for each key whose value differs from the recipe's default."""
    try:
        fields = recipe_class(recipe).Config.model_fields
    except ConfigError:  # a recipe this process does not know: show everything
        fields = {}
    shown = []
    for key, value in config.items():
        info = fields.get(key)
        if info is not None and not info.is_required():
            default = info.get_default(call_default_factory=True)
            if _canonical(default) == _canonical(value):
                continue
        text = value if isinstance(value, str) else json.dumps(value)
        if len(text) > MAX_VALUE_CHARS:
            text = text[: MAX_VALUE_CHARS - 1] + "…"
        shown.append(f"{key}={text}")
    return " ".join(shown)


def _canonical(value: Any) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, default=str)


def headline(recipe: str, summary: dict[str, Any]) -> str:
    """One figure of the run's summary: its recipe's first headline metric, else a success
    rate or return, else the first number."""
    numbers = {
        k: v for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    try:
        declared = recipe_class(recipe).headline_metrics or ()
    except ConfigError:
        declared = ()
    for metric in (*declared, *PREFERRED_METRICS):
        for key, value in numbers.items():
            if key == metric or key.endswith(f"/{metric}"):
                return f"{key}={format_cell(float(value))}"
    for key, value in numbers.items():
        return f"{key}={format_cell(float(value))}"
    return ""


def spend(llm: dict[str, Any] | None) -> str:
    if not llm or not llm.get("calls"):
        return "no LLM calls"
    cost = llm.get("cost_usd") or 0.0
    cost = 0.0 if isinstance(cost, float) and math.isnan(cost) else cost
    return f"{llm['calls']:g} calls, {llm.get('tokens', 0):g} tokens, ${cost:.4f}"


def _row(store: RunStore, run: RunRow, mode: str) -> dict[str, str]:
    return {
        "run_id": run.run_id,
        "mode": mode,
        "recipe": run.recipe,
        "status": run.status,
        "key config": key_config(run.recipe, run.config),
        "headline": headline(run.recipe, run.summary),
        "LLM spend": spend(store.llm_totals(run.run_id)),
        "created": run.created,
    }


# -- where the runs are -----------------------------------------------------------------------
def local_runs() -> list[dict[str, Any]]:
    """Embedded runs from the catalog, then the local orchestrator's runs; oldest first."""
    rows: list[dict[str, Any]] = []
    by_store: dict[str, list[str]] = {}
    for entry in catalog.entries(catalog.RUN):
        by_store.setdefault(entry["store"], []).append(entry["entry_id"])
    for path, run_ids in by_store.items():
        if not Path(path).exists():
            rows += [_missing(run_id, path) for run_id in run_ids]
            continue
        store = RunStore(path)
        try:
            for run_id in run_ids:
                run = store.get_run(run_id, with_phases=False)
                rows.append(_row(store, run, "embedded") if run else _missing(run_id, path))
        finally:
            store.close()
    orchestrator_store = catalog.orchestrator_store_path()
    if orchestrator_store is not None:
        store = RunStore(orchestrator_store)
        try:
            rows += [_row(store, run, "service") for run in store.list_runs()]
        finally:
            store.close()
    return sorted(rows, key=lambda row: row["created"])


def _missing(run_id: str, path: str) -> dict[str, Any]:
    row = dict.fromkeys(COLUMNS, "")
    row.update(run_id=run_id, mode="embedded", status=f"store gone ({path})", created=0.0)
    return row


def remote_runs(client: Any) -> list[dict[str, Any]]:
    """The orchestrator's runs (GET /runs, then GET /runs/{id} for config, summary, spend)."""
    rows = []
    for brief in client.runs():
        run = client.run(brief["run_id"])
        rows.append(
            {
                "run_id": run["run_id"],
                "mode": "service",
                "recipe": run["recipe"],
                "status": run["status"],
                "key config": key_config(run["recipe"], run.get("config") or {}),
                "headline": headline(run["recipe"], run.get("summary") or {}),
                "LLM spend": spend(run.get("llm")),
                "created": run.get("created", 0.0),
            }
        )
    return rows


def print_runs(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    console = console or output_console()
    table = Table(title=f"{len(rows)} runs")
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(row.get(column, "")) for column in COLUMNS))
    console.print(table)


# -- TensorBoard ------------------------------------------------------------------------------
def tensorboard_command(root: Path, port: int | None = None) -> list[str]:
    command = ["tensorboard", "--logdir", str(root)]
    return command + (["--port", str(port)] if port else [])
