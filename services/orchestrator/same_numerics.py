"""A run taken up again computes with the numerics it started with, or is not taken up.

`llmrl run --out DIR` and `llmrl sweep` resume an interrupted run, and `llmrl sweep` skips a
completed one, when the config is the same. The config does not hold the stated numerics
(`LLMRL_PRECISION`, `LLMRL_ADAM`, the CPU path pins): they are the process's environment, so
the same config under other settings would resume a run whose first phases computed otherwise
(its rows mixing two numerics, its provenance naming only the last), or report a run made under
other settings as this one. So a run records its numerics when it is created (a run stored
before that records none: its results' provenance says, once it has completed), and taking it
up under others is refused, naming each setting there and here and the command line that
continues it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.numerics import (
    listed_changes,
    numerics_changes,
    numerics_provenance,
    recorded_settings,
)
from llmrl.common.store import RunRow
from llmrl.recipes.config import ConfigError
from llmrl.recipes.results import read_results


def run_numerics(run: RunRow) -> dict[str, Any]:
    """The numerics `run` computed with: recorded when it was created, else (a run stored
    before they were) its results' provenance; {} when neither says."""
    if run.numerics:
        return run.numerics
    try:
        results = read_results(run.out_dir)
    except (OSError, ValueError):  # unreadable results: nothing recorded to compare
        return {}
    recorded = results.provenance.get("numerics") if results is not None else None
    return recorded if isinstance(recorded, dict) else {}


def check_same_numerics(
    run: RunRow, out: Path, command: str, here: dict[str, Any] | None = None
) -> None:
    """Refuse (ConfigError) to resume or reuse `run` in `out` when this process's stated
    numerics (`here`, default `numerics_provenance()`) differ from those it computed with;
    `command` is the command a user typed ("llmrl sweep ..."), given back with the run's
    settings before it."""
    recorded = run_numerics(run)
    changes = numerics_changes(recorded, here or numerics_provenance())
    if not changes:
        return
    told = recorded_settings(recorded, changes)
    raise ConfigError(
        f"run {run.run_id} in {out} computed with other numerics ({listed_changes(changes)}); "
        "taking it up here would mix them in one run. Continue it under its own settings"
        + (f" (`{told} {command}`)" if told else "")
        + ", or give another --out to start a new run under these",
        [{"loc": ["numerics"], "msg": "differ from the stored run's"}],
    )
