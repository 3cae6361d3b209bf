"""The plots of an experiment report: learning curves with shaded intervals, headline bars."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.common.plots import pyplot

MAX_HEADLINE_PANELS = 9  # a 3×3 grid stays readable; further metrics are in the tables
TITLE_CHARS_PER_INCH = 9  # characters of the figure's title (12 pt) that fit in an inch


def _draw_band(ax: Any, band: dict[str, Any], label: str) -> None:
    """A mean line and its shaded 95% band, in one colour."""
    (line,) = ax.plot(band["x"], band["mean"], label=label)
    ax.fill_between(band["x"], band["low"], band["high"], color=line.get_color(), alpha=0.2)


def _save(fig: Any, axes: Any, used: int, path: Path, title: str, bottom: float = 0.0) -> None:
    """Hide the panels past the `used` first, title the figure and write it (`bottom`: the
    share of its height kept free below the panels, for a legend)."""
    plt = pyplot()
    for ax in list(axes.flat)[used:]:
        ax.axis("off")
    # a title wider than the figure is wrapped to it (a one-panel figure would clip it)
    lines = textwrap.wrap(title, max(24, int(fig.get_figwidth() * TITLE_CHARS_PER_INCH)))
    fig.suptitle("\n".join(lines))
    fig.tight_layout(rect=(0, bottom, 1, 1))  # it makes room for the title itself
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_curves(curves: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    """One panel per tag; per config the mean over seeds and its 95% band."""
    plt = pyplot()
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
    plt = pyplot()
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


def headline_bars(methods: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Each method's group and series: a row such as {task, method} groups its bars by all
    but its last value (the task; the config too where there are several) and colours them by
    the last (the method), so one task's methods stand side by side."""
    several_configs = len({method["config"] for method in methods}) > 1
    groups, series = [], []
    for method in methods:
        row = method["row"]
        values = [str(v) for v in row.values()] if isinstance(row, dict) else [str(row)]
        values = [v for v in values if v]
        head, last = values[:-1], values[-1] if values else method["config"]
        groups.append(" / ".join([method["config"]] * (several_configs or not head) + head))
        series.append(last)
    return groups, series


def headline_metrics(methods: list[dict[str, Any]]) -> list[str]:
    """The metrics that get a panel: those not zero (or missing) for every method, at most
    MAX_HEADLINE_PANELS (a local model's cost/ep_usd of 0 everywhere is said by the table)."""
    metrics = list(dict.fromkeys(m for method in methods for m in method["metrics"]))
    shown = [m for m in metrics if np.nan_to_num([_get(x, m, "mean") for x in methods]).any()]
    return (shown or metrics)[:MAX_HEADLINE_PANELS]


def plot_headline(methods: list[dict[str, Any]], path: Path, title: str) -> None:
    """One panel per headline metric that is not zero everywhere; a bar per method with its
    95% interval, grouped (a task's methods together) and coloured by method."""
    plt = pyplot()
    metrics = headline_metrics(methods)
    groups, series = headline_bars(methods)
    group_names = list(dict.fromkeys(groups))
    series_names = list(dict.fromkeys(series))
    colours = {name: f"C{i % 10}" for i, name in enumerate(series_names)}
    width = max(groups.count(name) for name in group_names) if len(group_names) > 1 else 1
    # bar i sits in its group's block of `width` slots, one slot apart from the next group
    slots = {name: index * (width + 1) for index, name in enumerate(group_names)}
    positions, seen = [], dict.fromkeys(group_names, 0)
    for group in groups:
        positions.append(slots[group] + seen[group] if width > 1 else len(positions))
        seen[group] += 1
    positions_array = np.array(positions, dtype=float)
    columns = min(3, max(1, len(metrics)))
    rows = math.ceil(len(metrics) / columns) or 1
    height = 0.6 + 0.3 * (max(positions, default=0) + 1) * rows + 1.5 * rows
    fig, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, height), squeeze=False)
    for index, (ax, metric) in enumerate(zip(axes.flat, metrics, strict=False)):
        means = np.array([_get(method, metric, "mean") for method in methods])
        lows = np.array([_get(method, metric, "low") for method in methods])
        highs = np.array([_get(method, metric, "high") for method in methods])
        errors = np.nan_to_num(np.stack([means - lows, highs - means]), nan=0.0).clip(min=0)
        colour = [colours[name] for name in series] if width > 1 else "tab:blue"
        ax.barh(positions_array, np.nan_to_num(means), xerr=errors, color=colour, alpha=0.8)
        if width > 1:  # a tick per group, the methods told apart by colour
            centres = [slots[name] + (groups.count(name) - 1) / 2 for name in group_names]
            labels = group_names if index % columns == 0 else []
            ax.set_yticks(centres, labels, fontsize="small")
        else:
            labels = [f"{g} ({s})" if g != s else g for g, s in zip(groups, series, strict=True)]
            ax.set_yticks(positions_array, labels if index % columns == 0 else [], fontsize="small")
        ax.invert_yaxis()
        ax.set_title(metric)
    bottom = 0.0
    if width > 1:
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours[n], alpha=0.8) for n in series_names]
        # as many entries a row as the figure's width holds (a narrow one would clip them)
        entry_inches = 0.6 + 0.09 * max(len(name) for name in series_names)
        ncol = max(1, min(6, len(series_names), int(fig.get_figwidth() / entry_inches)))
        fig.legend(handles, series_names, loc="lower center", ncol=ncol)
        bottom = (0.3 + 0.25 * math.ceil(len(series_names) / ncol)) / height  # the legend's rows
    caption = f"{title}: mean over seeds, 95% bootstrap interval"
    _save(fig, axes, len(metrics), path, caption, bottom)


def _get(method: dict[str, Any], metric: str, field: str) -> float:
    value = method["metrics"].get(metric, {}).get(field)
    return math.nan if value is None else float(value)
