"""Reported figures as data: an experiment's report kept beside its file, and the docs'
results tables rendered from it.

    llmrl results keep runs/quick-when2ask services/recipes/when2ask/experiments/quick.yaml
    llmrl results render            # docs/recipes/<recipe>.md between the results markers
    llmrl results render --check    # exit 1 where a page and its stored reports disagree

`keep` reads the sweep's run store, finds a completed run for every run the experiment file
plans (same recipe, same full config: the report is the file's, or nothing is kept), builds
the report over seeds with the recipe's targets, and writes a small JSON beside the file
(`<name>.results.json`: tables, verdicts, runs, no curves). `render` writes each recipe page's
results section from those files alone, so a figure on the site is one its stored report
holds; the test suite runs `render --check`.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from llmrl.common.store import RunStore
from llmrl.orchestrator.compare import RunData, build_report
from llmrl.orchestrator.experiment_files import RECIPES_DIR, load_experiment
from llmrl.orchestrator.experiments import plan_experiment
from llmrl.orchestrator.sources import STORE_FILE, from_store
from llmrl.recipes.base import ConfigError
from llmrl.recipes.targets import verdicts_markdown

SUFFIX = ".results.json"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
DOCS_DIR = RECIPES_DIR.parent.parent / "docs" / "recipes"
REPO_ROOT = RECIPES_DIR.parent.parent


def stored_path(experiment_file: Path) -> Path:
    """Where the stored report of `experiment_file` lives: beside it, `<name>.results.json`."""
    return experiment_file.with_name(experiment_file.stem + SUFFIX)


def _canonical(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def completed_runs(out_dir: Path) -> list[RunData]:
    """Every completed run in the run store of `out_dir` (a sweep's or a run's out dir)."""
    path = out_dir / STORE_FILE
    if not path.is_file():
        raise ConfigError(
            f"{out_dir}: no run store ({STORE_FILE}); give the --out directory of the sweep "
            "that ran the experiment",
            [{"loc": ["out_dir"], "msg": "no run store"}],
        )
    store = RunStore(path)
    try:
        return [from_store(store, row) for row in store.list_runs() if row.status == "completed"]
    finally:
        store.close()


def keep(out_dir: Path, experiment_file: Path) -> Path:
    """Store the report of `experiment_file`'s runs found in `out_dir`; ConfigError naming the
    planned runs (grid point and seed) that have no completed run of the same config."""
    experiment = load_experiment(experiment_file)
    planned = plan_experiment(experiment.spec(), str(experiment.name))
    by_config = {(run.recipe, _canonical(run.config)): run for run in completed_runs(out_dir)}
    matched, missing = [], []
    for run in planned:
        found = by_config.get((run.recipe, _canonical(run.config)))
        if found is None:
            point = ", ".join(f"{k}={v}" for k, v in run.point.items())
            missing.append(f"{point or run.recipe} seed {run.seed}")
        else:
            matched.append(found)
    if missing:
        raise ConfigError(
            f"{out_dir} holds no completed run of {experiment_file} for: {'; '.join(missing)} "
            f"(run `llmrl sweep --config {experiment_file} --out {out_dir}` to complete it)",
            [{"loc": ["runs"], "msg": "planned runs without a completed run"}],
        )
    with tempfile.TemporaryDirectory() as scratch:
        report = build_report(matched, scratch, str(experiment.name), plots=False)
    stored = {
        "experiment": experiment.name,
        "file": _relative(experiment_file),
        "description": experiment.description,
        "budget": experiment.budget,
        "claim": experiment.claim.model_dump() if experiment.claim else None,
        "kept": time.strftime("%Y-%m-%d", time.gmtime()),
        "statistics": report["statistics"],
        "configs": report["configs"],
        "tables": report["tables"],
        "verdicts": report["verdicts"],
        "runs": [{k: run[k] for k in ("run_id", "config", "seed")} for run in report["runs"]],
    }
    path = stored_path(experiment_file)
    path.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n")
    return path


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def stored_reports(recipes_dir: Path = RECIPES_DIR) -> dict[str, list[dict[str, Any]]]:
    """Every stored report, by the recipe package it belongs to, in file-name order."""
    reports: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(recipes_dir.glob(f"*/experiments/*{SUFFIX}")):
        reports.setdefault(path.parent.parent.name, []).append(json.loads(path.read_text()))
    return reports


def results_section(reports: list[dict[str, Any]]) -> str:
    """The markdown of a recipe page's results section: per stored report, what it is, the
    command that reproduces it, its table over seeds and its targets' verdicts."""
    parts = []
    for report in reports:
        claim = report.get("claim") or {}
        lines = [
            f"### `{Path(report['file']).name}`",
            "",
            report.get("description") or "",
            "",
            f"`llmrl sweep --config {report['file']}`"
            + (f" ({report['budget']})" if report.get("budget") else "")
            + f"; report kept {report['kept']}.",
        ]
        if claim:
            lines += ["", f"Claim: {claim['statement']}."]
            if claim.get("target"):
                lines.append(f"Target: {claim['target']}.")
            if claim.get("paper"):
                lines.append(f"Paper: {claim['paper']}.")
        for table in report["tables"]:
            columns = table["columns"]
            lines += ["", f"{table['title'] or table['recipe']}: mean [95% CI] over seeds", ""]
            lines.append("| " + " | ".join(columns) + " |")
            lines.append("|" + "|".join("---" for _ in columns) + "|")
            for row in table["rows"]:
                lines.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
        if report["verdicts"]:
            lines += ["", "Targets:", "", *verdicts_markdown(report["verdicts"])]
        seeds = "; ".join(f"{c['config']}: seeds {c['seeds']}" for c in report["configs"])
        lines += ["", f"Runs: {seeds}. {report['statistics']['interval']}."]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def page_name(recipe_package: str) -> str:
    return recipe_package.replace("_", "-") + ".md"


def render(
    recipes_dir: Path = RECIPES_DIR, docs_dir: Path = DOCS_DIR, check: bool = False
) -> list[Path]:
    """Write (or with `check`, only compare) each recipe page's results section; returns the
    pages that changed (or differ)."""
    changed = []
    reports = stored_reports(recipes_dir)
    for page in sorted(docs_dir.glob("*.md")):
        text = page.read_text()
        if BEGIN not in text or END not in text:
            continue
        package = page.stem.replace("-", "_")
        body = results_section(reports.get(package, []))
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        new = f"{head}{BEGIN}\n{body + chr(10) if body else ''}{END}{tail}"
        if new != text:
            changed.append(page)
            if not check:
                page.write_text(new)
    return changed
