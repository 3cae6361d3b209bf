"""The recipe `grpo`'s results table (a row per method: success, return, length, env steps,
CPU-minutes of training, success gained over the zero-shot model per CPU-minute), its claim
and its learning-curve plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.plots import pyplot
from llmrl.recipes.glam.report import success_curves
from llmrl.recipes.grpo.config import GrpoConfig
from llmrl.recipes.results import Results
from llmrl.recipes.targets import ConfigResults, Verdict, judge


def grpo_targets(results: ConfigResults) -> list[Verdict]:
    """GRPO's held-out success against GLAM's, paired within each seed, at the same env-step
    budget (> 0: GRPO learns more per env step); the same for CPU-minutes is the table's
    `gain_per_cpu_minute`, which the report compares by seed."""
    grpo, glam = {"method": "grpo", "test": "train"}, {"method": "glam", "test": "train"}
    if results.row(**grpo) is None or results.row(**glam) is None:
        return []
    return [
        judge(
            "grpo − glam, held-out success",
            results.paired("success_rate", grpo, glam),
            ">",
            0.0,
        ),
        judge(
            "grpo − glam, success gained per CPU-minute",
            results.paired("gain_per_cpu_minute", grpo, glam),
            ">",
            0.0,
        ),
    ]


def grpo_results(
    cfg: GrpoConfig,
    evaluations: list[dict[str, Any]],
    trained: dict[str, dict[str, Any]],
    plots: list[str] | None = None,
) -> Results:
    zero = next((e["success_rate"] for e in evaluations if e["method"] == "zero-shot"), None)
    rows = []
    for e in evaluations:
        out = trained.get(e["method"], {})
        cpu = out.get("cpu_minutes", 0.0)
        gain = (e["success_rate"] - zero) / cpu if cpu and zero is not None else None
        rows.append(
            {
                "method": e["method"],
                "test": "train",
                "success_rate": e["success_rate"],
                "mean_return": e["mean_return"],
                "mean_length": e["mean_length"],
                "env_steps": e.get("env_steps", 0) if out else 0,
                "cpu_minutes": cpu,
                "gain_per_cpu_minute": gain,
                "episodes": e["episodes"],
            }
        )
    notes = [
        f"env {cfg.env}, model {cfg.hf_model or cfg.model}, budget {cfg.train_steps} env steps, "
        f"{cfg.eval_episodes} held-out episodes each (seeds from "
        f"{cfg.seed + cfg.eval_seed_offset}), {'greedy' if cfg.greedy else 'sampled'} "
        "evaluation; cpu_minutes: CPU time of the training process (all its threads)",
    ]
    if "grpo" in trained:
        out = trained["grpo"]
        losses = [entry["loss"] for entry in out["losses"]]
        loss = f"{losses[0]:.3g} -> {losses[-1]:.3g}" if losses else "none logged"
        notes.append(
            f"grpo: TRL GRPOTrainer, LoRA r={cfg.lora_r} on the top {cfg.lora_layers or 'all'} "
            f"layers, G={cfg.group_size} episodes per seed x {cfg.groups_per_step} seeds per "
            f"step, {out['update']} steps, {out['env_steps']} env steps in {out['episodes']} "
            f"episodes (training success {out['train_success_rate']:.2f}); TRL loss {loss}; "
            f"{out['dtype']} on {cfg.device} with {out['threads']} torch threads; "
            f"{out['llm_calls']} generations, {out['prompt_tokens']:,} prompt + "
            f"{out['completion_tokens']:,} completion tokens (local, cost 0); "
            f"{out['wall_minutes']:.1f} wall-minutes"
        )
    if "glam" in trained:
        out = trained["glam"]
        notes.append(
            f"glam: {out['served_model']} after {out['global_step']} env steps "
            f"({out['update']} PPO updates, glam's settings{_glam_extra(cfg)}); "
            f"{out['wall_minutes']:.1f} wall-minutes"
        )
    curves = success_curves(evaluations)
    return Results(
        title=f"grpo on {cfg.env}",
        rows=rows,
        notes=notes,
        plots=plots or [],
        curves=curves,
        measured=["cpu_minutes", "gain_per_cpu_minute"],
    )


def _glam_extra(cfg: GrpoConfig) -> str:
    return "".join(f", {key}={value}" for key, value in cfg.glam.items())


def plot_learning_curve(
    tb_dirs: dict[str, Path], evaluations: list[dict[str, Any]], path: Path, title: str
) -> bool:
    """Left: each trained method's training success by env step (TensorBoard `charts/success`,
    per-step means); right: held-out success at each saved version. False with nothing."""
    from llmrl.recipes.glam.report import per_step_means

    training: dict[str, tuple[list[int], list[float]]] = {}
    for method, tb in tb_dirs.items():
        if not tb.is_dir():
            continue
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(tb)).Reload()
        if "charts/success" in events.Tags()["scalars"]:
            training[method] = per_step_means(events.Scalars("charts/success"))
    curves = {e["method"]: e["curve"] for e in evaluations if e.get("curve")}
    if not training and not curves:
        return False
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for method, (steps, values) in training.items():
        axes[0].plot(steps, values, marker=".", label=method)
    axes[0].set_title("training episodes")
    for method, points in curves.items():
        steps = [p["global_step"] for p in points]
        axes[1].plot(steps, [p["success_rate"] for p in points], marker="o", label=method)
    axes[1].set_title("held-out episodes")
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.set_ylabel("success")
        ax.set_ylim(-0.02, 1.02)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
