"""The recipe `glam`'s results table: method x test, with the change relative to training."""

from __future__ import annotations

from pathlib import Path
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
    cfg: GlamConfig,
    evaluations: list[dict[str, Any]],
    train: dict[str, Any] | None,
    plots: list[str] | None = None,
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
    return Results(title=f"glam on {cfg.env}", rows=rows, notes=notes, plots=plots or [])


def plot_learning_curve(tb_dir: Path, path: Path, title: str) -> bool:
    """Training success and return (mean per logged step) against env steps, from the
    llm-ppo run's TensorBoard `charts/`; False when it logged no episode."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb_dir)).Reload()
    if "charts/success" not in events.Tags()["scalars"]:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, tag in zip(axes, ("charts/success", "charts/episodic_return"), strict=True):
        steps, values = per_step_means(events.Scalars(tag))
        ax.plot(steps, values, marker=".")
        ax.set_xlabel("env steps")
        ax.set_ylabel(tag.rpartition("/")[2])
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def per_step_means(scalars: list[Any]) -> tuple[list[int], list[float]]:
    """The mean of the values logged at each step (one per finished episode), by step."""
    by_step: dict[int, list[float]] = {}
    for scalar in scalars:
        by_step.setdefault(int(scalar.step), []).append(float(scalar.value))
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]
