"""The recipe `glam`'s results table (method x test, with the change relative to the training
vocabulary and the paper's figures beside ours) and its plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.episodes import EpisodeRecord
from llmrl.common.plots import pyplot
from llmrl.recipes.glam.config import GlamConfig
from llmrl.recipes.glam.paper import NOTES as PAPER_NOTES
from llmrl.recipes.glam.paper import PAPER_SUCCESS, paper_success
from llmrl.recipes.glam.prompt import action_phrases
from llmrl.recipes.results import Results, learning_curve
from llmrl.recipes.targets import ConfigResults, Verdict, judge


def action_distribution(records: list[EpisodeRecord]) -> dict[str, float]:
    """The policy's mean probability of each action phrase over every step it scored (the
    `probabilities` its LLM calls record); empty for policies that record none. What a
    success rate hides: a policy that seldom says "go forward" seldom reaches anything."""
    totals: dict[str, float] = {}
    steps = 0
    for record in records:
        for call in record.llm_calls:
            probabilities = call.info.get("probabilities")
            if not probabilities:
                continue
            # records written before calls named their phrases scored BabyAI-Text's six
            phrases = call.info.get("phrases") or action_phrases("babyai")
            if len(phrases) != len(probabilities):
                continue
            for phrase, p in zip(phrases, probabilities, strict=True):
                totals[phrase] = totals.get(phrase, 0.0) + float(p)
            steps += 1
    return {phrase: total / steps for phrase, total in totals.items()} if steps else {}


TARGET_GAIN = 0.20  # success over the zero-shot LLM on held-out episodes (the status table's)


def glam_targets(results: ConfigResults) -> list[Verdict]:
    """GLAM's held-out success over the zero-shot LLM's (>= +0.20), paired within each seed;
    and over the random policy's."""
    glam = {"method": "glam", "test": "train"}
    if results.row(**glam) is None:
        return []
    verdicts = []
    for baseline, threshold in (("zero-shot", TARGET_GAIN), ("random", 0.0)):
        if results.row(method=baseline, test="train") is not None:
            verdicts.append(
                judge(
                    f"glam − {baseline}, held-out success",
                    results.paired("success_rate", glam, {"method": baseline, "test": "train"}),
                    ">=" if threshold else ">",
                    threshold,
                    PAPER_SUCCESS["glam"] if baseline == "zero-shot" else None,
                )
            )
    return verdicts


def glam_results(
    cfg: GlamConfig,
    evaluations: list[dict[str, Any]],
    env_steps: dict[str, int],
    trained: dict[str, dict[str, Any]],
    plots: list[str] | None = None,
) -> Results:
    """One row per (method, test): success, its change vs the training vocabulary (the
    paper's form), return, length, the env steps the method learned from, the paper's
    figure."""
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
                "env_steps": env_steps.get(e["method"], 0),
                "episodes": e["episodes"],
                "paper": paper_success(e["method"], e["test"]),
            }
        )
    notes = [
        f"env {cfg.env}, model {cfg.model}, budget {cfg.train_steps} env steps, "
        f"{cfg.eval_episodes} held-out episodes each (seeds from "
        f"{cfg.seed + cfg.eval_seed_offset}), evaluated every {cfg.eval_every} updates"
    ]
    for method, out in trained.items():
        if method == "bc":
            demos = out["demos"]
            notes.append(
                f"bc: {out['served_model']} after {out['sft_steps']} SFT steps on "
                f"{demos['examples']} bot steps ({demos['env_steps']} env steps; bot success "
                f"{demos['bot_success_rate']}); SFT loss {out['first_loss']:.3g} -> "
                f"{out['last_loss']:.3g}"
            )
        elif method in ("symbolic-ppo", "drrn"):
            learner = "SB3 PPO" if method == "symbolic-ppo" else "SB3 DQN"
            notes.append(
                f"{method}: {learner} after {out['global_step']} env steps "
                f"({out['update']} updates of {cfg.ppo.num_envs} x {cfg.ppo.num_steps})"
            )
        else:
            full = cfg.full_finetune(method)
            name = out["checkpoint"] if full else out["served_model"]
            trains = "every weight" if full else "LoRA"
            notes.append(
                f"{method}: {name} after {out['global_step']} env steps ({out['update']} "
                f"updates, {trains} trained)"
            )
    for e in evaluations:
        distribution = e.get("action_probabilities")
        if e["test"] == "train" and distribution:
            shares = ", ".join(f"{phrase} {p:.2f}" for phrase, p in distribution.items())
            notes.append(f"{e['method']}: mean policy over its held-out steps: {shares}")
    notes += list(PAPER_NOTES)
    curves = success_curves(evaluations)
    return Results(
        title=f"glam on {cfg.env}", rows=rows, notes=notes, plots=plots or [], curves=curves
    )


def plot_eval_curves(curves: dict[str, list[dict[str, Any]]], path: Path, title: str) -> bool:
    """Held-out success against env steps, one line per trained method; False when no
    method has a point."""
    if not any(curves.values()):
        return False
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, points in curves.items():
        steps = [p["global_step"] for p in points]
        ax.plot(steps, [p["success_rate"] for p in points], marker="o", label=method)
    ax.set_xlabel("env steps")
    ax.set_ylabel("success on held-out seeds")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_learning_curve(tb_dir: Path, path: Path, title: str) -> bool:
    """Training success and return (mean per logged step) against env steps, from the
    llm-ppo run's TensorBoard `charts/`; False when it logged no episode (or nothing at all:
    a training resumed from a line already at its last update writes no events)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not tb_dir.is_dir():
        return False
    events = EventAccumulator(str(tb_dir)).Reload()
    if "charts/success" not in events.Tags()["scalars"]:
        return False
    plt = pyplot()

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


def success_curves(evaluations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each trained method's held-out success by env step (its versions' evaluations on the
    training task), as the report's learning curves."""
    return [
        learning_curve(
            "held-out success by env step",
            e["method"],
            [point["global_step"] for point in e["curve"]],
            [point["success_rate"] for point in e["curve"]],
        )
        for e in evaluations
        if e.get("test", "train") == "train" and e.get("curve")
    ]
