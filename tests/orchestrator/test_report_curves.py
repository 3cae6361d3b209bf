"""Plots a reader can read (issue 53, item 5): a recipe's learning curves are split per panel
(task and measure) and line (method), smoothed, with the seeds' band."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmrl.orchestrator.compare import RunData, build_report, smooth
from llmrl.recipes.results import Results, learning_curve


def test_a_curve_is_kept_as_binned_means():
    x = np.arange(1000)
    curve = learning_curve("task: return", "learned", x, x % 2, bins=10)
    assert len(curve["x"]) == 10 and curve["y"] == pytest.approx([0.5] * 10)
    short = learning_curve("task: return", "learned", [1, 2, float("nan")], [3, 4, 5])
    assert short["x"] == [1.0, 2.0] and short["y"] == [3.0, 4.0]  # no bins needed, NaN dropped


def test_smoothing_averages_a_window_and_keeps_the_length():
    noisy = np.array([0.0, 1.0] * 50)
    smoothed = smooth(noisy)
    assert smoothed.shape == noisy.shape
    assert np.abs(smoothed[10:-10] - 0.5).max() < 0.15  # the alternation is averaged out


def _run(seed: int, offset: float) -> RunData:
    steps = np.arange(0, 2000, 10)
    curves = [
        learning_curve("KeyInBox: return by step", "learned", steps, steps / 2000 + offset),
        learning_curve("KeyInBox: return by step", "never-ask", steps, 0 * steps + offset),
        learning_curve("SimpleDoorKey: return by step", "learned", steps, steps / 1000),
    ]
    rows = [{"method": "learned", "success": 1.0}]
    return RunData(
        f"r{seed}", "table-only", {"seed": seed}, "completed", Results("t", rows, curves=curves)
    )


def test_the_report_plots_each_panel_and_line_over_seeds(tmp_path: Path):
    report = build_report([_run(0, 0.0), _run(1, 0.1), _run(2, 0.2)], tmp_path, "curves")
    bands = {(b["panel"], b["line"]): b for b in report["recipe_curves"]}
    assert set(bands) == {
        ("KeyInBox: return by step", "learned"),
        ("KeyInBox: return by step", "never-ask"),
        ("SimpleDoorKey: return by step", "learned"),
    }
    never = bands[("KeyInBox: return by step", "never-ask")]
    assert never["seeds"] == 3 and never["mean"][50] == pytest.approx(0.1)
    assert never["low"][50] < 0.1 < never["high"][50]  # the seeds' band
    assert report["curves"] == {}  # the raw episode stream is not drawn beside them
    assert "curves.png" in report["plots"] and (tmp_path / "curves.png").stat().st_size > 0


def _method(config: str, row: dict, success: float) -> dict:
    return {"config": config, "row": row, "metrics": {"success": {"mean": success}}}


def test_headline_bars_group_a_tasks_methods_and_colour_them_by_method(tmp_path: Path):
    from llmrl.orchestrator.report_plots import headline_bars, headline_metrics, plot_headline

    methods = [
        _method("when2ask", {"task": task, "method": method}, 0.5)
        for task in ("KeyInBox", "SimpleDoorKey")
        for method in ("learned", "always")
    ]
    groups, series = headline_bars(methods)
    assert groups == ["KeyInBox", "KeyInBox", "SimpleDoorKey", "SimpleDoorKey"]
    assert series == ["learned", "always", "learned", "always"]
    # several configs: the config joins the group; a one-value row is its own series
    two = [_method("lr=1e-3", {"method": "glam"}, 0.6), _method("lr=1e-4", {"method": "glam"}, 0.4)]
    assert headline_bars(two) == (["lr=1e-3", "lr=1e-4"], ["glam", "glam"])
    free = [{**m, "metrics": {**m["metrics"], "cost": {"mean": 0.0}}} for m in methods]
    assert headline_metrics(free) == ["success"]  # zero for every method: no panel
    for name, rows in (("grouped.png", methods), ("flat.png", two)):
        plot_headline(rows, tmp_path / name, "t")
        assert (tmp_path / name).stat().st_size > 0
