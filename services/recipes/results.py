"""A run's results table (`Results`: rows, notes, plots, learning curves) and how it is read
back from a run's out dir."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.common.provenance import describe


@dataclass
class Results:
    """A run's final table (rows of equal keys) plus notes and the plot files beside it."""

    title: str
    rows: list[dict[str, Any]]
    columns: list[str] | None = None  # default: keys of the first row, in order
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # file names relative to the out dir
    # per-unit values that targets pair across methods, e.g. "held-out/bootstrap": each
    # evaluation episode's success, in the same episode order for every method
    samples: dict[str, list[float]] = field(default_factory=dict)
    # learning curves the experiment report aggregates over seeds: `learning_curve(...)`s,
    # one per panel (a task and a measure) and line (a method)
    curves: list[dict[str, Any]] = field(default_factory=list)
    # where it was measured (`llmrl.common.provenance`): set when the run writes its results
    provenance: dict[str, Any] = field(default_factory=dict)
    # columns that measure this machine's time (CPU minutes and what is divided by them), not
    # the run's computation: a rerun cannot give their bits again, so same-bits comparisons
    # leave them out (`computed_rows`)
    measured: list[str] = field(default_factory=list)

    def column_names(self) -> list[str]:
        return self.columns or (list(self.rows[0]) if self.rows else [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": self.column_names(),
            "rows": self.rows,
            "notes": self.notes,
            "plots": self.plots,
            **({"samples": self.samples} if self.samples else {}),
            **({"curves": self.curves} if self.curves else {}),
            **({"provenance": self.provenance} if self.provenance else {}),
            **({"measured": self.measured} if self.measured else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        return cls(
            title=data["title"],
            rows=data["rows"],
            columns=data.get("columns"),
            notes=data.get("notes", []),
            plots=data.get("plots", []),
            samples=data.get("samples", {}),
            curves=data.get("curves", []),
            provenance=data.get("provenance", {}),
            measured=data.get("measured", []),
        )

    def to_markdown(self) -> str:
        columns = self.column_names()
        lines = [f"# {self.title}", ""]
        lines.append("| " + " | ".join(columns) + " |")
        lines.append("|" + "|".join("---" for _ in columns) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(format_cell(row.get(c)) for c in columns) + " |")
        lines += [""] + [f"- {note}" for note in self.notes]
        if self.provenance:
            lines.append(f"- measured on: {describe(self.provenance)}")
        lines += [f"![{plot}]({plot})" for plot in self.plots]
        return "\n".join(lines).rstrip() + "\n"


def computed_rows(
    results: dict[str, Any], also_measured: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """A results.json's rows without its measured columns (time on this machine) and
    `also_measured` (those another run of it declared): what the same config and seed must
    give again, bit for bit, anywhere the numerics are the same."""
    measured = set(results.get("measured", [])) | set(also_measured)
    return [{k: v for k, v in row.items() if k not in measured} for row in results["rows"]]


MAX_DIFFERENCES = 10  # differing cells a comparison lists before it counts the rest


def differing_cells(
    expected: list[dict[str, Any]],
    got: list[dict[str, Any]],
    labels: tuple[str, str] = ("expected", "got"),
) -> list[str]:
    """Each differing cell of two runs' rows (at most MAX_DIFFERENCES, then a count) as
    'row i, column: <labels[0]> X, <labels[1]> Y'; [] when every row is identical. A 1 and a
    1.0 are the same number; True and 1 are not."""
    old_label, new_label = labels
    differences = []
    if len(expected) != len(got):
        differences.append(f"{len(expected)} rows {old_label}, {len(got)} {new_label}")
    for i, (old, new) in enumerate(zip(expected, got, strict=False)):
        for column in list(old) + [c for c in new if c not in old]:
            a, b = old.get(column, "(absent)"), new.get(column, "(absent)")
            if a != b or (type(a) is not type(b) and not _same_number(a, b)):
                differences.append(f"row {i}, {column}: {old_label} {a!r}, {new_label} {b!r}")
    if len(differences) > MAX_DIFFERENCES:
        rest = len(differences) - MAX_DIFFERENCES
        differences = [*differences[:MAX_DIFFERENCES], f"... and {rest} more differing cells"]
    return differences


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


CURVE_BINS = 100  # points a run keeps of a curve: binned means, so results.json stays small


def learning_curve(
    panel: str, line: str, x: Sequence[float], y: Sequence[float], bins: int = CURVE_BINS
) -> dict[str, Any]:
    """One learning curve of a run for `Results.curves`: `y` over `x` (e.g. return over
    environment steps), reduced to the means of at most `bins` equal spans of x. The report
    plots one panel per `panel` (e.g. "KeyInBox: return") and a line per `line` (a method),
    smoothed, with the seeds' band."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    if len(xs) > bins:
        edges = np.linspace(xs.min(), xs.max(), bins + 1)
        index = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, bins - 1)
        counts = np.bincount(index, minlength=bins)
        filled = counts > 0  # one pass per array, not one per bin
        xs = np.bincount(index, weights=xs, minlength=bins)[filled] / counts[filled]
        ys = np.bincount(index, weights=ys, minlength=bins)[filled] / counts[filled]
    return {"panel": panel, "line": line, "x": xs.tolist(), "y": ys.tolist()}


def finite_or_none(value: Any) -> Any:
    """`value` with every NaN or infinite number (numpy's too) replaced by None, for JSON."""
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(item) for item in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    try:
        return value if math.isfinite(float(value)) else None
    except (TypeError, ValueError):  # not a number: json's default decides
        return value


def format_cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return "" if value is None else str(value)


def read_results(out_dir: str | Path) -> Results | None:
    path = Path(out_dir) / "results.json"
    return Results.from_dict(json.loads(path.read_text())) if path.exists() else None
