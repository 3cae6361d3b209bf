"""Aggregation over seeds: an experiment's (or any set of runs') report.

Runs of one recipe whose configs differ only in `seed` are seeds of one *config* (a grid
point); the config's label names the keys that differ between the compared runs. Each row
of the recipe's own results table is matched across seeds by its leading text columns (e.g.
when2ask's task and method), so a *method* is a config × a row. For every method the report
gives the mean, the 95% bootstrap interval and the IQM over seeds of the recipe's headline
metrics (`Recipe.headline_metrics`, default every numeric column; llmrl.common.stats), the
recipe's table with "mean [low, high]" cells, and learning curves (the runs' TensorBoard
`charts/episodic_return` and `charts/success`, interpolated on a common x grid) with shaded
intervals:

    results.json   the report as data (every per-seed value too)
    results.md     the tables
    curves.png, headline.png
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.common import stats
from llmrl.common.safe_write import write_text
from llmrl.recipes.config import ConfigError, recipe_class
from llmrl.recipes.results import Results, format_cell
from llmrl.recipes.targets import ConfigResults, Row, Verdict, verdicts_markdown
from llmrl.recipes.tracking import identity

CURVE_TAGS = ("charts/episodic_return", "charts/success")
CURVE_POINTS = 100
SMOOTHING = 0.05  # a curve's moving-average window: this share of its points
CONFIG_COLUMN = "config"
VARIES = "(varies by seed)"


@dataclass
class RunData:
    """What a report needs of one run, wherever it was stored."""

    run_id: str
    recipe: str
    config: dict[str, Any]
    status: str
    results: Results | None = None
    curves: dict[str, np.ndarray] = field(default_factory=dict)  # tag → values, x = 1..n

    @property
    def seed(self) -> Any:
        return self.config.get("seed")


@dataclass
class ConfigGroup:
    """The seeds of one config (one recipe, one grid point)."""

    recipe: str
    point: dict[str, Any]
    runs: list[RunData]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={_short_value(v)}" for k, v in self.point.items()) or self.recipe

    @property
    def seeds(self) -> list[Any]:
        """Each seed once (a recipe's parts of one seed are several runs: `part_keys`)."""
        return list(dict.fromkeys(run.seed for run in self.runs))


@dataclass
class TableLayout:
    """The recipe's table: its columns, which of them key a row, and which are numbers."""

    title: str
    columns: list[str]
    keys: list[str]
    numeric: list[str]


def _short_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float)  # bool too: a success flag averages to a rate


# -- grouping --------------------------------------------------------------------------------
def part_keys(recipe: str) -> tuple[str, ...]:
    """The recipe's `part_keys` (none for a recipe this process does not know)."""
    try:
        return recipe_class(recipe).part_keys
    except ConfigError:  # a remote plugin's recipe
        return ()


def group_runs(runs: Sequence[RunData]) -> list[ConfigGroup]:
    """Runs grouped by (recipe, config without seed), labelled by the keys that differ
    between the recipe's compared runs (and by the recipe when several are compared). A config
    is taken as a run's identity (`identity`): where it reported, and the folder where its
    machine keeps the data, do not make two seeds of one config two configs; nor do the keys
    that choose a run's parts (`Recipe.part_keys`) make two parts of one config two."""
    several_recipes = len({run.recipe for run in runs}) > 1
    groups: dict[str, ConfigGroup] = {}
    for recipe in dict.fromkeys(run.recipe for run in runs):
        mine = [run for run in runs if run.recipe == recipe]
        left_out = {"seed", *part_keys(recipe)}
        configs = [
            {k: v for k, v in identity(run.config).items() if k not in left_out} for run in mine
        ]
        varying = _differing_keys(configs)
        for run, config in zip(mine, configs, strict=True):
            point = {"recipe": recipe} if several_recipes else {}
            point.update({k: config[k] for k in varying if k in config})
            key = json.dumps([recipe, config], sort_keys=True, default=str)
            groups.setdefault(key, ConfigGroup(recipe, point, [])).runs.append(run)
    for group in groups.values():
        group.runs.sort(key=lambda run: (str(type(run.seed)), run.seed))
    return list(groups.values())


def _differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    keys = list(dict.fromkeys(k for config in configs for k in config))
    return [
        key
        for key in keys
        if len({json.dumps(c.get(key), sort_keys=True, default=str) for c in configs}) > 1
        or any(key not in c for c in configs)
    ]


def table_layout(runs: Sequence[RunData]) -> TableLayout:
    """Columns in the recipe's order; leading text columns key a row; numbers are aggregated."""
    tables = [run.results for run in runs if run.results is not None]
    columns = list(dict.fromkeys(c for table in tables for c in table.column_names()))
    rows = [row for table in tables for row in table.rows]
    kinds: dict[str, str] = {}
    for column in columns:
        values = [row.get(column) for row in rows if row.get(column) is not None]
        if values and all(isinstance(v, str) for v in values):
            kinds[column] = "text"
        elif values and all(_is_number(v) for v in values):
            kinds[column] = "number"
        else:
            kinds[column] = "other"  # empty, mixed or structured: shown when equal over seeds
    keys: list[str] = []
    for column in columns:
        if kinds[column] != "text":
            break
        keys.append(column)
    numeric = [c for c in columns if kinds[c] == "number"]
    return TableLayout(tables[0].title if tables else "", columns, keys, numeric)


def headline_metrics(recipe: str, layout: TableLayout) -> list[str]:
    """The recipe's declared headline metrics that its table has (default: every number)."""
    try:
        declared = recipe_class(recipe).headline_metrics
    except ConfigError:  # a recipe this process does not know (a remote plugin's)
        declared = None
    if not declared:
        return list(layout.numeric)
    return [metric for metric in declared if metric in layout.numeric]


def _row_key(row: dict[str, Any], keys: list[str], index: int) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in keys) if keys else (f"row {index}",)


# -- aggregation -------------------------------------------------------------------------------
def aggregate_rows(group: ConfigGroup, layout: TableLayout) -> list[dict[str, Any]]:
    """One entry per row of the recipe's table: its key, and each column over the seeds."""
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for run in group.runs:
        if run.results is None:
            continue
        seen: set[tuple[Any, ...]] = set()
        for index, row in enumerate(run.results.rows):
            key = _row_key(row, layout.keys, index)
            if key in seen:  # a repeated key within one run: keep its first row
                continue
            seen.add(key)
            rows = by_key.setdefault(key, [])
            if any(kept["seed"] == run.seed for kept in rows):  # two parts of a seed: the first
                continue
            rows.append({"seed": run.seed, **row})
    entries = []
    for key, rows in by_key.items():
        values = {c: [row.get(c) for row in rows] for c in layout.columns}
        entries.append(
            {
                "key": dict(zip(layout.keys, key, strict=True)) if layout.keys else {},
                "row": key[0] if not layout.keys else None,
                "seeds": [row["seed"] for row in rows],
                "values": values,
                "estimates": {c: stats.estimate(values[c]) for c in layout.numeric},
            }
        )
    return entries


def _cell(column: str, layout: TableLayout, entry: dict[str, Any]) -> str:
    if column in layout.numeric:
        return entry["estimates"][column].format()
    distinct = {json.dumps(v, sort_keys=True, default=str) for v in entry["values"][column]}
    if len(distinct) == 1:
        return format_cell(entry["values"][column][0])
    return VARIES


def smooth(values: np.ndarray, share: float = SMOOTHING) -> np.ndarray:
    """A centred moving average over `share` of the points (shorter at the ends)."""
    window = max(1, round(len(values) * share))
    if window == 1:
        return values
    kernel = np.ones(window)
    return np.convolve(values, kernel, mode="same") / np.convolve(
        np.ones_like(values), kernel, mode="same"
    )


def curve_bands(group: ConfigGroup, tag: str) -> dict[str, list[float]] | None:
    """The group's curves for `tag` on a common x grid, each smoothed: mean and 95% band
    over seeds."""
    by_seed: dict[Any, np.ndarray] = {}
    for run in group.runs:  # one curve per seed (two parts of a seed: the first run's)
        if len(run.curves.get(tag, ())) > 0:
            by_seed.setdefault(run.seed, run.curves[tag])
    curves = list(by_seed.values())
    if not curves:
        return None
    shortest = min(len(curve) for curve in curves)
    x = np.linspace(1, shortest, min(shortest, CURVE_POINTS))
    matrix = np.stack([smooth(np.interp(x, np.arange(1, len(c) + 1), c)) for c in curves])
    centre, low, high = stats.curve_band(matrix)
    return {
        "x": x.tolist(),
        "mean": centre.tolist(),
        "low": low.tolist(),
        "high": high.tolist(),
        "seeds": len(curves),
    }


def recipe_curve_bands(group: ConfigGroup) -> list[dict[str, Any]]:
    """The group's recipe curves (`Results.curves`), per panel and line: each seed's curve
    on the x range all seeds cover, smoothed, then the mean and 95% band over seeds."""
    by_key: dict[tuple[str, str], dict[Any, tuple[np.ndarray, np.ndarray]]] = {}
    for run in group.runs:
        for curve in run.results.curves if run.results else []:
            x, y = np.asarray(curve["x"], dtype=float), np.asarray(curve["y"], dtype=float)
            if len(x):  # one curve per seed (two parts of a seed: the first run's)
                by_key.setdefault((curve["panel"], curve["line"]), {}).setdefault(run.seed, (x, y))
    bands = []
    for (panel, line), by_seed in by_key.items():
        curves = list(by_seed.values())
        low_x, high_x = max(x.min() for x, _ in curves), min(x.max() for x, _ in curves)
        if high_x < low_x:  # the seeds' curves do not overlap
            continue
        points = max(2, min(CURVE_POINTS, max(len(x) for x, _ in curves)))
        grid = np.linspace(low_x, high_x, points) if high_x > low_x else np.array([low_x])
        matrix = np.stack([smooth(np.interp(grid, x, y)) for x, y in curves])
        centre, low, high = stats.curve_band(matrix)
        bands.append(
            {
                "config": group.label,
                "panel": panel,
                "line": line,
                "x": grid.tolist(),
                "mean": centre.tolist(),
                "low": low.tolist(),
                "high": high.tolist(),
                "seeds": len(curves),
            }
        )
    return bands


# -- the report --------------------------------------------------------------------------------
def build_report(
    runs: Sequence[RunData],
    out_dir: str | Path,
    title: str = "comparison",
    notes: Sequence[str] = (),
    plots: bool = True,
) -> dict[str, Any]:
    """Aggregate `runs` over seeds; write results.json, results.md and plots into `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    waiting = [run for run in runs if run.results is None]
    notes = [
        *notes,
        *(f"run {r.run_id} ({r.status}) has no results yet: left out" for r in waiting),
    ]
    groups = group_runs([run for run in runs if run.results is not None])
    methods: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, Any]]] = {}
    for recipe in dict.fromkeys(group.recipe for group in groups):
        recipe_methods, table, recipe_verdicts = recipe_section(
            [g for g in groups if g.recipe == recipe]
        )
        methods += recipe_methods
        tables.append(table)
        verdicts += recipe_verdicts
    recipe_curves = [band for group in groups for band in recipe_curve_bands(group)]
    for group in groups if not recipe_curves else []:  # the recipes' own curves say more
        for tag in CURVE_TAGS:
            band = curve_bands(group, tag)
            if band is not None:
                curves.setdefault(tag, []).append({"config": group.label, **band})
    if any(len(group.seeds) == 1 for group in groups):
        notes.append(f"{stats.ONE_VALUE_NOTE} (configs with a single run)")
    report: dict[str, Any] = {
        "title": title,
        "statistics": {
            "interval": f"{stats.CONFIDENCE:.0%} percentile bootstrap of the mean over seeds "
            f"(scipy.stats.bootstrap, {stats.RESAMPLES} resamples, random state "
            f"{stats.RANDOM_STATE})",
            "iqm": f"interquartile mean (scipy.stats.trim_mean, {stats.IQM_TRIM})",
        },
        "runs": [_run_entry(run, group.label) for group in groups for run in group.runs]
        + [_run_entry(run, None) for run in waiting],
        "configs": [{"config": g.label, "recipe": g.recipe, "seeds": g.seeds} for g in groups],
        "methods": methods,
        "tables": tables,
        "verdicts": verdicts,
        "curves": curves,
        "recipe_curves": recipe_curves,
        "notes": notes,
        "plots": [],
    }
    if plots and methods:
        from llmrl.orchestrator.report_plots import plot_curves, plot_headline, plot_recipe_curves

        several = len(groups) > 1
        if recipe_curves:
            plot_recipe_curves(recipe_curves, out / "curves.png", title, several)
            report["plots"].append("curves.png")
        elif curves:
            plot_curves(curves, out / "curves.png", title)
            report["plots"].append("curves.png")
        plot_headline(methods, out / "headline.png", title)
        report["plots"].append("headline.png")
    report = json_safe(report)
    # each written afresh and renamed onto its name: a link planted there is never followed
    write_text(out / "results.json", json.dumps(report, indent=2, allow_nan=False) + "\n")
    write_text(out / "results.md", report_markdown(report))
    return report


def recipe_section(
    groups: list[ConfigGroup],
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """The methods (config × table row) of one recipe's configs, its table over seeds, and
    its targets' verdicts per config."""
    recipe = groups[0].recipe
    layout = table_layout([run for group in groups for run in group.runs])
    headline = headline_metrics(recipe, layout)
    methods, rows, verdicts = [], [], []
    for group in groups:
        entries = aggregate_rows(group, layout)
        verdicts += [v.to_dict() for v in judge_targets(group, entries)]
        for entry in entries:
            methods.append(
                {
                    "config": group.label,
                    "recipe": recipe,
                    "point": group.point,
                    "row": entry["key"] or entry["row"],
                    "seeds": entry["seeds"],
                    "run_ids": [run.run_id for run in group.runs],
                    "metrics": {
                        m: {**entry["estimates"][m].to_dict(), "values": entry["values"][m]}
                        for m in headline
                    },
                }
            )
            rows.append(
                {CONFIG_COLUMN: group.label, **{c: _cell(c, layout, entry) for c in layout.columns}}
            )
    table = {
        "recipe": recipe,
        "title": layout.title,
        "columns": [CONFIG_COLUMN, *layout.columns],
        "key_columns": layout.keys,
        "headline_metrics": headline,
        "rows": rows,
    }
    return methods, table, verdicts


def judge_targets(group: ConfigGroup, entries: list[dict[str, Any]]) -> list[Verdict]:
    """The recipe's targets (`Recipe.targets`) on one config's rows over its seeds."""
    try:
        recipe = recipe_class(group.recipe)
    except ConfigError:  # a recipe this process does not know (a remote plugin's)
        return []
    samples: dict[str, dict[Any, list[float]]] = {}
    for run in group.runs:
        for name, values in (run.results.samples if run.results else {}).items():
            by_seed = samples.setdefault(name, {})  # two parts of a seed: the first run's
            by_seed.setdefault(run.seed, [float(v) for v in values])
    rows = [
        Row(key=entry["key"] or {"row": entry["row"]}, seeds=entry["seeds"], values=entry["values"])
        for entry in entries
    ]
    results = ConfigResults(config=group.label, rows=rows, samples=samples)
    return [replace(verdict, config=group.label) for verdict in recipe.targets(results)]


def _run_entry(run: RunData, config: str | None) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "recipe": run.recipe,
        "config": config,
        "seed": run.seed,
        "status": run.status,
    }


def json_safe(value: Any) -> Any:
    """The report as strict JSON: NaN and infinities (a metric with no values) become null."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_report(console: Any, report: dict[str, Any]) -> None:
    """The report's recipe tables (mean [95% CI] over seeds) and its targets' verdicts, as
    rich tables on `console`."""
    from rich.table import Table

    for data in report["tables"]:
        table = Table(title=f"{data['title'] or data['recipe']}: mean [95% CI] over seeds")
        for column in data["columns"]:
            table.add_column(column)
        for row in data["rows"]:
            table.add_row(*(str(row.get(c, "")) for c in data["columns"]))
        console.print(table)
    if not report.get("verdicts"):
        return
    table = Table(title="targets")
    for column in ("config", "target", "measured: mean [95% CI]", "held to", "verdict", "paper"):
        table.add_column(column)
    for data in report["verdicts"]:
        verdict = Verdict.from_dict(data)
        colour = "green" if verdict.met else "red" if verdict.met is False else "yellow"
        table.add_row(
            verdict.config,
            verdict.target,
            verdict.measured(),
            f"{verdict.direction} {verdict.threshold:g}",
            f"[{colour}]{verdict.status}[/{colour}]",
            verdict.paper or "",
        )
    console.print(table)


def format_number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.4g}"


def format_estimate(value: dict[str, Any]) -> str:
    """A report's metric entry as "mean [low, high]"."""
    return (
        f"{format_number(value['mean'])} "
        f"[{format_number(value['low'])}, {format_number(value['high'])}]"
    )


def method_name(method: dict[str, Any]) -> str:
    row = method["row"]
    row_text = " / ".join(map(str, row.values())) if isinstance(row, dict) else str(row)
    return f"{method['config']} ({row_text})" if row_text else method["config"]


def report_markdown(report: dict[str, Any]) -> str:
    lines = [f"# {report['title']}", ""]
    configs = report["configs"]
    lines.append(
        f"{len(report['runs'])} runs: {len(configs)} config(s) × seeds "
        + "; ".join(f"{c['config']}: {c['seeds']}" for c in configs)
        + "."
    )
    lines += [
        "",
        f"Intervals: {report['statistics']['interval']}. IQM: {report['statistics']['iqm']}.",
        "",
        "## Headline metrics",
        "",
        "| method | metric | mean | 95% CI | IQM | seeds |",
        "|---|---|---|---|---|---|",
    ]
    for method in report["methods"]:
        for metric, value in method["metrics"].items():
            low, high = format_number(value["low"]), format_number(value["high"])
            mean, iqm = format_number(value["mean"]), format_number(value["iqm"])
            lines.append(
                f"| {method_name(method)} | {metric} | {mean} | [{low}, {high}] | {iqm} | "
                f"{value['n']} |"
            )
    for table in report["tables"]:
        lines += ["", f"## {table['title'] or table['recipe']}: mean [95% CI] over seeds", ""]
        lines.append("| " + " | ".join(table["columns"]) + " |")
        lines.append("|" + "|".join("---" for _ in table["columns"]) + "|")
        for row in table["rows"]:
            lines.append("| " + " | ".join(str(row.get(c, "")) for c in table["columns"]) + " |")
    if report.get("verdicts"):
        lines += ["", "## Targets", "", *verdicts_markdown(report["verdicts"])]
    lines += ["", "## Runs", "", "| run | config | seed | status |", "|---|---|---|---|"]
    for run in report["runs"]:
        lines.append(
            f"| {run['run_id']} | {run['config'] or ''} | {run['seed']} | {run['status']} |"
        )
    lines += [""] + [f"- {note}" for note in report["notes"]]
    lines += [f"![{plot}]({plot})" for plot in report["plots"]]
    return "\n".join(lines).rstrip() + "\n"
