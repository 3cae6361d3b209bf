"""The plots of an experiment report: learning curves with shaded intervals, headline bars."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

MAX_HEADLINE_PANELS = 9  # a 3×3 grid stays readable; further metrics are in the tables


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_band(ax: Any, band: dict[str, Any], label: str) -> None:
    """A mean line and its shaded 95% band, in one colour."""
    (line,) = ax.plot(band["x"], band["mean"], label=label)
    ax.fill_between(band["x"], band["low"], band["high"], color=line.get_color(), alpha=0.2)


def _save(fig: Any, axes: Any, used: int, path: Path, title: str) -> None:
    """Hide the panels past the `used` first, title the figure and write it."""
    plt = _pyplot()
    for ax in list(axes.flat)[used:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_curves(curves: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    """One panel per tag; per config the mean over seeds and its 95% band."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.8), squeeze=False)
    for ax, (tag, bands) in zip(axes[0], curves.items(), strict=True):
        for band in bands:
            _draw_band(ax, band, f"{band['config']} (n={band['seeds']})")
        ax.set_xlabel("episode")
        ax.set_ylabel(tag.rpartition("/")[2])
        ax.set_title(tag)
        ax.legend(fontsize="small")
    _save(fig, axes, len(curves), path, f"{title}: smoothed mean over seeds, 95% bootstrap band")


MAX_CURVE_PANELS = 16


def plot_recipe_curves(
    bands: list[dict[str, Any]], path: Path, title: str, name_configs: bool = False
) -> None:
    """The recipes' learning curves: a panel per measure (and config, when several), a line
    per method, each the smoothed mean over seeds with its 95% band."""
    plt = _pyplot()
    panels: dict[str, list[dict[str, Any]]] = {}
    for band in bands:
        name = f"{band['config']}: {band['panel']}" if name_configs else band["panel"]
        panels.setdefault(name, []).append(band)
    names = list(panels)[:MAX_CURVE_PANELS]
    columns = min(4, len(names))
    rows = math.ceil(len(names) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        for band in panels[name]:
            _draw_band(ax, band, f"{band['line']} (n={band['seeds']})")
        ax.set_title(name, fontsize="medium")
        ax.legend(fontsize="x-small")
    _save(fig, axes, len(names), path, f"{title}: smoothed mean over seeds, 95% bootstrap band")


def plot_headline(methods: list[dict[str, Any]], path: Path, title: str) -> None:
    """One panel per headline metric; a bar per method with its 95% interval."""
    from llmrl.orchestrator.compare import method_name

    plt = _pyplot()
    metrics = list(dict.fromkeys(m for method in methods for m in method["metrics"]))
    metrics = metrics[:MAX_HEADLINE_PANELS]
    columns = min(3, max(1, len(metrics)))
    rows = math.ceil(len(metrics) / columns) or 1
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(4.5 * columns, 0.6 + 0.35 * len(methods) * rows + 1.5 * rows),
        squeeze=False,
    )
    names = [method_name(method) for method in methods]
    for index, (ax, metric) in enumerate(zip(axes.flat, metrics, strict=False)):
        means = np.array([_get(method, metric, "mean") for method in methods])
        lows = np.array([_get(method, metric, "low") for method in methods])
        highs = np.array([_get(method, metric, "high") for method in methods])
        errors = np.nan_to_num(np.stack([means - lows, highs - means]), nan=0.0).clip(min=0)
        positions = np.arange(len(methods))
        ax.barh(positions, np.nan_to_num(means), xerr=errors, color="tab:blue", alpha=0.7)
        ax.set_yticks(positions, names if index % columns == 0 else [], fontsize="small")
        ax.invert_yaxis()
        ax.set_title(metric)
    _save(fig, axes, len(metrics), path, f"{title}: mean over seeds, 95% bootstrap interval")


def _get(method: dict[str, Any], metric: str, field: str) -> float:
    value = method["metrics"].get(metric, {}).get(field)
    return math.nan if value is None else float(value)
