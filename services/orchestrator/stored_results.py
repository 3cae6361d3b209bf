"""Reported figures as data: an experiment's report kept beside its file, and the docs'
results tables rendered from it.

    llmrl results keep runs/quick-when2ask services/recipes/when2ask/experiments/quick.yaml
    llmrl results render            # docs/recipes/<recipe>.md between the results markers
    llmrl results render --check    # exit 1 where a page and its stored reports disagree

`keep` reads the sweep's run store, finds a completed run for every run the experiment file
plans (same recipe, same full config: the report is the file's, or nothing is kept), builds
the report over seeds with the recipe's targets, and writes a small JSON beside the file
(`<name>.results.json`: tables, verdicts, each run's config, final results with their learning
curves, the machine it ran on and its time in phases).
`render` writes each recipe page's results section from those files alone, so a figure on
the site is one its stored report holds: per report its plots (headline bars with their 95%
intervals, and the learning curves with the seeds' band where the kept runs have curves; runs
kept before 2026-12-05 have none) under docs/recipes/figures/<recipe>/, then its table and
verdicts. The test suite runs `render --check`.

An experiment longer than one sitting is kept in parts: `keep --partial` stores the runs done
so far (the report says which planned runs it lacks), and a later `keep` of another out dir
(the same file, `seeds=[...]` given to the sweep for the rest) adds its runs to the kept ones,
each matched by its full config; the report is complete once every planned run is there.

    llmrl sweep --config FILE seeds=[0] --out runs/a && llmrl results keep --partial runs/a FILE
    llmrl sweep --config FILE seeds=[1,2] --out runs/b && llmrl results keep runs/b FILE
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from llmrl.common.datasets import portable
from llmrl.common.numerics import precision_label
from llmrl.common.provenance import describe
from llmrl.common.store import RunStore
from llmrl.orchestrator.compare import RunData, build_report
from llmrl.orchestrator.experiment_files import RECIPES_DIR, load_experiment
from llmrl.orchestrator.experiments import plan_experiment
from llmrl.orchestrator.sources import STORE_FILE, from_store
from llmrl.recipes.config import ConfigError
from llmrl.recipes.results import Results
from llmrl.recipes.targets import verdicts_markdown
from llmrl.recipes.tracking import identity

SUFFIX = ".results.json"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
# the page's opening figure: its status report's plot, command and verdicts (`glance_section`)
GLANCE_BEGIN, GLANCE_END = "<!-- glance:begin -->", "<!-- glance:end -->"
DOCS_DIR = RECIPES_DIR.parent.parent / "docs" / "recipes"
REPO_ROOT = RECIPES_DIR.parent.parent


def stored_path(experiment_file: Path) -> Path:
    """Where the stored report of `experiment_file` lives: beside it, `<name>.results.json`."""
    return experiment_file.with_name(experiment_file.stem + SUFFIX)


def canonical_config(config: dict[str, Any]) -> str:
    """A config as a run's identity: its tracking settings say where it reported, not what it
    computed (and runs kept before they existed have none)."""
    return json.dumps(identity(config), sort_keys=True, default=str)


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


def run_seconds(out_dir: Path) -> dict[str, float]:
    """Each run's time in its phases (from a phase's first start to its end, so a phase that
    was interrupted and resumed counts the pause too), by run id, for the runs in `out_dir`."""
    path = out_dir / STORE_FILE
    if not path.is_file():
        return {}
    store = RunStore(path)
    try:
        seconds = {}
        for row in store.list_runs():
            spans = [
                phase["finished"] - phase["started"]
                for phase in store.phases(row.run_id)
                if phase["started"] is not None and phase["finished"] is not None
            ]
            if spans:
                seconds[row.run_id] = sum(spans)
        return seconds
    finally:
        store.close()


def stored_report(experiment_file: Path) -> dict[str, Any] | None:
    """The stored report beside `experiment_file`, or None before its first keep."""
    path = stored_path(experiment_file)
    return json.loads(path.read_text()) if path.is_file() else None


def _kept_seconds(stored: dict[str, Any] | None) -> dict[str, float]:
    """Each kept run's time in phases, by run id (runs kept before runs were timed: none)."""
    runs = (stored or {}).get("runs", [])
    return {run["run_id"]: run["seconds"] for run in runs if "seconds" in run}


def kept_runs(stored: dict[str, Any] | None) -> list[RunData]:
    """The runs a stored report (`stored_report`; None: no keep yet) holds with their results (a
    report kept before runs carried results gives none)."""
    return [
        RunData(
            run["run_id"],
            run["recipe"],
            run["settings"],
            "completed",
            Results.from_dict(run["results"]),
        )
        for run in (stored or {}).get("runs", [])
        if "results" in run and "settings" in run
    ]


def _refuse_stale(kept: list[RunData], planned: list[Any], experiment_file: Path) -> None:
    """ConfigError when a run kept before is no longer one the file plans (the file, or a
    recipe default, changed since): keeping again would drop it from the stored report."""
    plans = {(run.recipe, canonical_config(run.config)) for run in planned}
    stale = [run for run in kept if (run.recipe, canonical_config(run.config)) not in plans]
    if not stale:
        return
    lines = []
    for run in stale:
        same_seed = [p for p in planned if p.recipe == run.recipe and p.seed == run.seed]
        changes = min((_changes(run.config, p.config) for p in same_seed or planned), key=len)
        lines.append(f"{run.run_id}: {', '.join(changes[:6])}{' ...' * (len(changes) > 6)}")
    message = (
        f"{stored_path(experiment_file)} keeps {len(stale)} run(s) that {experiment_file} no "
        f"longer plans, whose config changed since (kept -> planned): {'; '.join(lines)}. "
        "Keeping now would drop them: run those seeds again with the file as it is, or put "
        "the changed keys back in the file's config as they were kept"
    )
    raise ConfigError(message, [{"loc": ["runs"], "msg": "kept runs the file no longer plans"}])


def _changes(kept: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """`key: kept -> planned` for every key whose value differs (absent: `<none>`)."""

    def value(config: dict[str, Any], key: str) -> str:
        return json.dumps(config[key], sort_keys=True, default=str) if key in config else "<none>"

    keys = sorted(set(identity(kept)) | set(identity(planned)))
    return [
        f"{key}: {value(kept, key)} -> {value(planned, key)}"
        for key in keys
        if value(kept, key) != value(planned, key)
    ]


def _run_label(point: dict[str, Any], recipe: str, seed: Any) -> str:
    return f"{', '.join(f'{k}={v}' for k, v in point.items()) or recipe} seed {seed}"


def keep(out_dir: Path, experiment_file: Path, partial: bool = False) -> Path:
    """Store the report of `experiment_file`'s runs found in `out_dir` (and those kept before
    beside the file); ConfigError naming the planned runs (grid point and seed) that have no
    completed run of the same config, unless `partial` (then at least one must be there)."""
    experiment = load_experiment(experiment_file)
    planned = plan_experiment(experiment.spec(), str(experiment.name))
    before = stored_report(experiment_file)
    kept = kept_runs(before)
    _refuse_stale(kept, planned, experiment_file)
    by_config = {(run.recipe, canonical_config(run.config)): run for run in kept}
    # this out dir's runs win over kept ones of the same config (a re-run replaces its part)
    here = completed_runs(out_dir)
    by_config.update({(run.recipe, canonical_config(run.config)): run for run in here})
    matched, missing, missing_seeds = [], [], set()
    for run in planned:
        found = by_config.get((run.recipe, canonical_config(run.config)))
        if found is None:
            missing.append(_run_label(run.point, run.recipe, run.seed))
            missing_seeds.add(run.seed)
        else:
            matched.append(found)
    if missing and (not partial or not matched):
        rest = ",".join(str(seed) for seed in sorted(missing_seeds))
        raise ConfigError(
            f"{out_dir} holds no completed run of {experiment_file} for: {'; '.join(missing)} "
            f"(run `llmrl sweep --config {experiment_file} seeds=[{rest}] --out {out_dir}` to "
            "complete it"
            + (", or keep what is there with `llmrl results keep --partial`)" if matched else ")"),
            [{"loc": ["runs"], "msg": "planned runs without a completed run"}],
        )
    with tempfile.TemporaryDirectory() as scratch:
        report = build_report(matched, scratch, str(experiment.name), plots=False)
    by_id = {run.run_id: run for run in matched}
    seconds = {**_kept_seconds(before), **run_seconds(out_dir)}
    stored = {
        "experiment": experiment.name,
        "file": _relative(experiment_file),
        "description": experiment.description,
        "budget": experiment.budget,
        "claim": experiment.claim.model_dump() if experiment.claim else None,
        "status": experiment.status,
        "kept": time.strftime("%Y-%m-%d", time.gmtime()),
        "planned": len(planned),
        "missing": missing,
        "statistics": report["statistics"],
        "configs": report["configs"],
        "tables": report["tables"],
        "verdicts": report["verdicts"],
        "runs": [
            _stored_run(entry, by_id[entry["run_id"]], seconds.get(entry["run_id"]))
            for entry in report["runs"]
        ],
    }
    path = stored_path(experiment_file)
    path.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n")
    return path


def _stored_run(entry: dict[str, Any], run: RunData, seconds: float | None) -> dict[str, Any]:
    """A run as kept: its report entry (`config`: its grid point's label), its full config
    (`settings`), its time in phases, and final results (rows, notes, per-unit samples and
    where it was measured, learning curves; no plot files), so a later keep can rebuild the
    report, and render its plots, with it."""
    stored = {k: entry[k] for k in ("run_id", "recipe", "config", "seed")}
    stored["settings"] = portable(run.config)  # no machine's data folder in a kept file
    if seconds is not None:
        stored["seconds"] = round(seconds)
    if run.results is not None:
        final = run.results.to_dict()
        stored["results"] = {k: v for k, v in final.items() if k != "plots"}
    return stored


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


FIGURES_DIR = "figures"  # docs/recipes/figures/<recipe package>/<experiment>-<plot>.png


def report_figures(report: dict[str, Any], package: str, docs_dir: Path | None) -> list[str]:
    """The plots of a stored report, rebuilt from its kept runs, as paths relative to the
    recipe pages; written under `docs_dir` (None: only named, as `render --check` needs)."""
    runs = kept_runs(report)
    if not runs:
        return []
    stem = Path(report["file"]).name.removesuffix(".yaml")
    with tempfile.TemporaryDirectory() as scratch:
        built = build_report(runs, scratch, stem, plots=True)
        names = [f"{FIGURES_DIR}/{package}/{stem}-{plot}" for plot in built["plots"]]
        if docs_dir is not None:
            for plot, name in zip(built["plots"], names, strict=True):
                (docs_dir / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(scratch) / plot, docs_dir / name)
    return names


def results_section(
    reports: list[dict[str, Any]], figures: dict[str, list[str]] | None = None
) -> str:
    """The markdown of a recipe page's results section: per stored report, what it is, the
    command that reproduces it, its plots (`figures`, by report file), its table over seeds
    and its targets' verdicts."""
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
        if report.get("missing"):
            kept = report["planned"] - len(report["missing"])
            lines += [
                "",
                f"**Partial: {kept} of its {report['planned']} planned runs kept so far**; "
                f"not yet run: {'; '.join(report['missing'])}. The figures below are over the "
                "kept runs only.",
            ]
        if claim:
            lines += ["", f"Claim: {claim['statement']}."]
            if claim.get("target"):
                lines.append(f"Target: {claim['target']}.")
            if claim.get("paper"):
                lines.append(f"Paper: {claim['paper']}.")
        for figure in (figures or {}).get(report["file"], []):
            kind = "learning curves" if figure.endswith("curves.png") else "headline figures"
            lines += ["", f"![{Path(report['file']).name}: {kind}]({figure})"]
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
        measured = measured_on(report["runs"])
        if measured:
            lines += ["", measured]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def measured_on(runs: list[dict[str, Any]]) -> str:
    """Where and how long a stored report's runs ran, e.g. `Measured on: <cpu>, 2 cores,
    torch 2.13.0, llmrl 1a2b3c4 (seeds 0, 1); 44-52 min per run.`; empty for runs kept
    before runs carried either."""
    machines: dict[str, list[str]] = {}
    for run in runs:
        provenance = (run.get("results") or {}).get("provenance")
        if provenance:
            machines.setdefault(describe(provenance), []).append(str(run.get("seed")))
    minutes = sorted(run["seconds"] / 60 for run in runs if run.get("seconds") is not None)
    parts = []
    if machines:
        where = "; ".join(
            f"{machine} (seeds {', '.join(dict.fromkeys(seeds))})"
            for machine, seeds in machines.items()
        )
        unknown = len(runs) - sum(len(seeds) for seeds in machines.values())
        parts.append(
            f"Measured on: {where}"
            + (f"; {unknown} run(s) kept before runs recorded it" if unknown else "")
        )
        precisions = {
            precision_label(run["results"]["provenance"]).split(" (")[0]
            for run in runs
            if (run.get("results") or {}).get("provenance")
        }
        if len(precisions) > 1:
            parts.append(
                f"its runs mixed precisions ({', '.join(sorted(precisions))}): a figure over "
                "them is not one setting's"
            )
    if minutes:
        span = (
            f"{minutes[0]:.0f}"
            if round(minutes[0]) == round(minutes[-1])
            else f"{minutes[0]:.0f}-{minutes[-1]:.0f}"
        )
        parts.append(
            f"{span} min per run ({len(minutes)} of {len(runs)} timed)"
            if len(minutes) < len(runs)
            else f"{span} min per run"
        )
    return ("; ".join(parts) + ".") if parts else ""


def experiment_state(experiment_file: Path) -> dict[str, Any]:
    """Where an experiment file stands: its planned runs, the runs its stored report keeps
    (none, some, or all), when it was kept, the seeds still to run and its budget."""
    experiment = load_experiment(experiment_file)
    planned = plan_experiment(experiment.spec(), str(experiment.name))
    stored = stored_report(experiment_file)
    kept = {(run.recipe, canonical_config(run.config)) for run in kept_runs(stored)}
    todo = [run for run in planned if (run.recipe, canonical_config(run.config)) not in kept]
    if stored is not None and "missing" not in stored:  # kept whole before runs kept configs
        todo = []
    seconds = sorted(_kept_seconds(stored).values())
    return {
        "file": _relative(experiment_file),
        "planned": len(planned),
        "kept_runs": len(planned) - len(todo),
        "kept": stored.get("kept") if stored else None,
        "to_run": [_run_label(run.point, run.recipe, run.seed) for run in todo],
        "seeds_to_run": sorted({run.seed for run in todo}),
        "budget": experiment.budget,
        # the median kept run's time in phases, beside the budget the file states
        "minutes_per_run": round(seconds[len(seconds) // 2] / 60) if seconds else None,
    }


def status_report(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The report a recipe page opens with: its experiment file's when the file says
    `status: true`, else the one over the most kept runs (a status figure over seeds rather
    than the quick file's check that everything runs), quick.yaml's last."""
    kept = [report for report in reports if kept_runs(report)]
    if not kept:
        return None
    named = [report for report in kept if report.get("status")]  # kept before it: not named
    if named:
        return named[0]
    return max(kept, key=lambda r: (not r["file"].endswith("/quick.yaml"), len(r["runs"])))


def glance_section(report: dict[str, Any] | None, figures: list[str]) -> str:
    """A page's opening: the status report's headline plot, the one command that reproduces
    it and its verdicts; the detail is in the results section further down."""
    if report is None:
        return ""
    partial = (
        f", **partial: {len(report['runs'])} of its {report['planned']} planned runs**"
        if report.get("missing")
        else ""
    )
    lines = [
        f"**At a glance** (`{Path(report['file']).name}`, kept {report['kept']}{partial}; the "
        "full table is under [Results](#results)): reproduce it with",
        "",
        f"    llmrl sweep --config {report['file']}",
    ]
    headline = [figure for figure in figures if figure.endswith("headline.png")]
    for figure in headline[:1]:
        lines += ["", f"![{Path(report['file']).name}: headline figures]({figure})"]
    if report["verdicts"]:
        lines += ["", *verdicts_markdown(report["verdicts"])]
    return "\n".join(lines)


def _replace_between(text: str, begin: str, end: str, body: str) -> str:
    if begin not in text or end not in text:
        return text
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body + chr(10) if body else ''}{end}{tail}"


def render(
    recipes_dir: Path = RECIPES_DIR, docs_dir: Path = DOCS_DIR, check: bool = False
) -> list[Path]:
    """Write (or with `check`, only compare) each recipe page's results section and opening
    figure; returns the pages that changed (or differ)."""
    changed = []
    reports = stored_reports(recipes_dir)
    for page in sorted(docs_dir.glob("*.md")):
        text = page.read_text()
        if BEGIN not in text or END not in text:
            continue
        package = page.stem.replace("-", "_")
        figures = {
            report["file"]: report_figures(report, package, None if check else docs_dir)
            for report in reports.get(package, [])
        }
        missing = [name for names in figures.values() for name in names
                   if not (docs_dir / name).is_file()]  # fmt: skip
        body = results_section(reports.get(package, []), figures)
        new = _replace_between(text, BEGIN, END, body)
        status = status_report(reports.get(package, []))
        glance = glance_section(status, figures.get(status["file"], []) if status else [])
        new = _replace_between(new, GLANCE_BEGIN, GLANCE_END, glance)
        if new != text or missing:
            changed.append(page)
            if not check:
                page.write_text(new)
    return changed
