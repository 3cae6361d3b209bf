"""The recipe `glam`'s results table: method x test, with the change relative to training."""

from __future__ import annotations

from typing import Any

from llmrl.recipes.base import Results
from llmrl.recipes.glam.config import GlamConfig

# Figures we can cite only second-hand (issue 11's summary of the paper; not checked against
# the paper itself).
PAPER_NOTES = (
    "paper (second-hand, issue 11): GFlan-T5-large (780M) ~0.8 success on the mixed "
    "BabyAI-Text tasks after ~250k steps; the maintainer reports Flan-T5-small ~0.2 after "
    "~10k steps with 32 envs",
)


def glam_results(
    cfg: GlamConfig, evaluations: list[dict[str, Any]], train: dict[str, Any] | None
) -> Results:
    """One row per (method, test): success, return, length, success change vs training."""
    on_train = {e["method"]: e["success_rate"] for e in evaluations if e["test"] == "train"}
    rows = []
    for e in evaluations:
        base = on_train.get(e["method"])
        change = e["success_rate"] - base if base is not None and e["test"] != "train" else 0.0
        rows.append(
            {
                "method": e["method"],
                "test": e["test"],
                "success_rate": e["success_rate"],
                "success_change": change,
                "mean_return": e["mean_return"],
                "mean_length": e["mean_length"],
                "episodes": e["episodes"],
            }
        )
    notes = [f"env {cfg.env}, model {cfg.model}, {cfg.eval_episodes} held-out episodes each"]
    if train is not None:
        notes.append(
            f"glam: {train['served_model']} after {train['global_step']} env steps "
            f"({train['update']} updates)"
        )
    notes += list(PAPER_NOTES)
    return Results(title=f"glam on {cfg.env}", rows=rows, notes=notes)
