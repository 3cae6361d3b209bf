"""`llmrl results check`: does this machine give an experiment's kept rows again?

    llmrl sweep --config services/recipes/glam/experiments/quick.yaml --out runs/glam-quick
    llmrl results check runs/glam-quick services/recipes/glam/experiments/quick.yaml

Each run of the kept report (`<name>.results.json` beside the file) is matched with the
completed run of the same recipe and full config in the sweep's out dir, and their rows are
compared cell by cell, the columns a results.json declares `measured` (time on the machine)
left out. The answer says, per run, where each side ran (CPU, precision, pinned CPU paths),
so a mismatch between two CPUs reads as such, and which cells differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmrl.common.provenance import describe
from llmrl.orchestrator.stored_results import canonical_config, completed_runs, stored_report
from llmrl.recipes.config import ConfigError
from llmrl.recipes.results import computed_rows, differing_cells


@dataclass
class RunCheck:
    """One kept run against the same run made here."""

    run_id: str
    kept_on: str  # `describe` of the kept run's provenance
    here_on: str | None  # None: the out dir has no completed run of this config
    rows: int
    differences: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.here_on is not None and not self.differences


def pins(provenance: dict[str, Any]) -> str:
    """The pinned CPU paths a run recorded, e.g. 'MKL_CBWR=AVX2, ...', or 'not pinned'."""
    recorded = (provenance.get("numerics") or {}).get("pins") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(recorded.items())) or "not pinned"


def check_against_kept(out_dir: Path, experiment_file: Path) -> list[RunCheck]:
    """Every run the kept report of `experiment_file` holds, compared with the completed run
    of the same recipe and config in `out_dir`. Raises ConfigError when the file has no kept
    report or the out dir holds none of its runs."""
    stored = stored_report(experiment_file)
    kept = [run for run in (stored or {}).get("runs", []) if "results" in run]
    if not kept:
        raise ConfigError(
            f"{experiment_file}: no kept report with rows beside it; `llmrl results list` "
            "shows which experiment files have one",
            [{"loc": ["experiment_file"], "msg": "no kept report"}],
        )
    here = {(run.recipe, canonical_config(run.config)): run for run in completed_runs(out_dir)}
    checks = []
    for run in kept:
        recorded = run["results"]
        made = here.get((run["recipe"], canonical_config(run["settings"])))
        kept_provenance = recorded.get("provenance", {})
        check = RunCheck(
            run["run_id"],
            kept_on=f"{describe(kept_provenance)}; {pins(kept_provenance)}",
            here_on=None,
            rows=len(recorded["rows"]),
        )
        if made is not None and made.results is not None:
            provenance = made.results.provenance
            check.here_on = f"{describe(provenance)}; {pins(provenance)}"
            here_now = {"rows": made.results.rows, "measured": made.results.measured}
            check.differences = differing_cells(
                computed_rows(recorded, made.results.measured),
                computed_rows(here_now, recorded.get("measured", [])),
                ("kept", "here"),
            )
        checks.append(check)
    if all(check.here_on is None for check in checks):
        raise ConfigError(
            f"{out_dir}: none of the {len(checks)} kept runs of {experiment_file} completed "
            f"there with the same config; run `llmrl sweep --config {experiment_file} --out "
            f"{out_dir}` first",
            [{"loc": ["out_dir"], "msg": "no matching run"}],
        )
    return checks
