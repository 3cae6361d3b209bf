"""The llm-personalize table (success per stage, per scene and split) and its plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np


def stage_rows(evaluations: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per scene and split (plus "all" per split): the success rate of each stage.

    `evaluations`: stage label -> the outputs of its evaluate phase (`groups` keyed
    "<scene>|<split>", each with `success_rate` and `episodes`).
    """
    keys: list[str] = []
    for outputs in evaluations.values():
        keys += [key for key in outputs["groups"] if key not in keys]
    rows = []
    for key in keys:
        scene, _, split = key.partition("|")
        row: dict[str, Any] = {"scene": scene, "episodes": split}
        for stage, outputs in evaluations.items():
            group = outputs["groups"].get(key)
            row[stage] = group["success_rate"] if group else math.nan
        rows.append(row)
    scenes = {row["scene"] for row in rows}
    if len(scenes) > 1:  # mean over scenes, weighted by episodes
        for split in dict.fromkeys(row["episodes"] for row in rows):
            row = {"scene": "all", "episodes": split}
            for stage, outputs in evaluations.items():
                groups = [g for k, g in outputs["groups"].items() if k.endswith(f"|{split}")]
                total = sum(g["episodes"] for g in groups)
                row[stage] = (
                    sum(g["success_rate"] * g["episodes"] for g in groups) / total
                    if total
                    else math.nan
                )
            rows.append(row)
    return rows


def plot_rounds(rows: list[dict[str, Any]], stages: list[str], path: str | Path) -> None:
    """Success rate per stage (zero-shot, bootstrap, round 1..K), a line per scene and split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(stages))
    for row in rows:
        style = "-" if row["episodes"] == "train" else "--"
        width = 2.5 if row["scene"] == "all" else 1.2
        values = [row.get(stage, math.nan) for stage in stages]
        ax.plot(x, values, style, marker="o", linewidth=width,
                label=f"{row['scene']} ({row['episodes']})")  # fmt: skip
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(x, stages)
    ax.set_ylabel("success rate (%)")
    ax.set_title("LLM-Personalize on Housekeep: success per round")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
