"""KALM's grounding, measured directly: how well the grounded LLM predicts CLEVR-Robot's next
state, for each grounding setting, without imagination or offline RL.

    .venv/bin/python -m llmrl.recipes.kalm.studies.grounding        # ~15 min on one core
    .venv/bin/python -m llmrl.recipes.kalm.studies.grounding --grounding-state-weights 1 20 100 \\
        --grounding-steps 300
    .venv/bin/python -m llmrl.recipes.kalm.studies.grounding --grounding-tasks dynamics \\
        --grounding-state-weights 1

Each setting grounds a fresh model with the learner's `kalm-grounding` algorithm (the recipe's
grounding phase, same code) on scripted-pusher episodes (`--scripted-episodes`), one per value
of `--grounding-state-weights`, then predicts the next state of every transition of other,
held-out episodes (`--test-episodes`, the next seed), twice: after the `dynamics` task's prompt
(state, action -> next state) and inside a trajectory prompt with the true states and actions
before it, the context imagination predicts in. Reported: the median and mean L2 error over the
10 numbers, beside the error of predicting "nothing moved" (the state before), and the last 10%
of each training loss. Writes results.json and the training episodes (train.npz, the `--dataset`
of `llmrl.recipes.kalm.studies.imagination`, whose instruction probe asks whether the grounding
reads the instruction) to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from rich.table import Table

from llmrl.common.console import output_console
from llmrl.common.threads import torch_threads
from llmrl.recipes.config import ConfigError
from llmrl.recipes.kalm.config import KalmConfig, discrete_action_size
from llmrl.recipes.kalm.grounded_lm import TASKS, dynamics_prompt, trajectory_prompt
from llmrl.recipes.options import add_model_options, check_each_value, model_from_options

WHOLE_EPISODES = 10**6  # dataset_episodes cuts episodes longer than this: none here


def one_step_errors(model, episodes) -> dict[str, list[float]]:
    """L2 errors of the predicted next state after the dynamics prompt and in a trajectory,
    and of "nothing moved", over every held-out transition."""
    import torch

    errors: dict[str, list[float]] = {"dynamics": [], "trajectory": [], "nothing moved": []}
    with torch.no_grad():
        for instruction, states, actions in episodes:
            context = [*trajectory_prompt(instruction), ("state", states[0], False)]
            for t, action in enumerate(actions):
                prompt = dynamics_prompt(states[t], action)
                context = [*context, ("action", action, False)]
                for name, items in (("dynamics", prompt), ("trajectory", context)):
                    predicted = model.predict_state(model.last_hidden([items]), states[t][None])
                    errors[name].append(float(np.linalg.norm(predicted[0] - states[t + 1])))
                errors["nothing moved"].append(float(np.linalg.norm(states[t] - states[t + 1])))
                context = [*context, ("state", states[t + 1], False)]
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_options(
        parser,
        KalmConfig,
        ["scripted_episodes", "scripted_noise", "scripted_goals_per_start", "grounding_steps",
         "grounding_batch_size", "grounding_layers", "state_target", "grounding_tasks",
         "grounding_action_weight", "model", "seed"],
        defaults={"scripted_episodes": 300, "scripted_noise": 0.3, "grounding_layers": 4,
                  "state_target": "delta"},
    )  # fmt: skip
    parser.add_argument(
        "--test-episodes", type=int, default=60, help="held-out episodes (another seed)"
    )
    parser.add_argument(
        "--grounding-state-weights", type=float, nargs="+", default=[1.0, 20.0, 100.0],
        help="grounding_state_weight values, one grounding each (KALM: 1)",
    )  # fmt: skip
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/eval-kalm-grounding"),
        help="run directory: a grounding per setting and results.json",
    )  # fmt: skip
    args = parser.parse_args()
    try:
        cfg = model_from_options(KalmConfig, args)
        for weight in args.grounding_state_weights:
            check_each_value(KalmConfig, args, "grounding_state_weight", weight)
    except ConfigError as exc:
        parser.error(str(exc))
    with torch_threads(args.torch_threads):
        rows = measure(cfg, args)
    report(cfg, args, rows)
    return 0


def measure(cfg: KalmConfig, args: argparse.Namespace) -> list[dict]:
    """One grounding per state weight, each measured on the same held-out transitions."""
    from llmrl.common.registry import registry
    from llmrl.learner.versions import Versions
    from llmrl.recipes.kalm.collect import collect_clevr
    from llmrl.recipes.kalm.grounding_sft import dataset_episodes
    from llmrl.recipes.progress import make_progress

    train = collect_clevr(
        cfg.scripted_episodes,
        noise=cfg.scripted_noise,
        seed=cfg.seed,
        goals_per_start=cfg.scripted_goals_per_start,
    )
    train.save(args.out / "train.npz")  # what studies.imagination's --dataset wants
    test = collect_clevr(args.test_episodes, noise=cfg.scripted_noise, seed=cfg.seed + 1)
    held_out = dataset_episodes([test], WHOLE_EPISODES)
    grounding = registry.get_algorithm("kalm-grounding")
    progress = make_progress(output_console())
    tasks = cfg.grounding_tasks or list(TASKS)
    rows = []
    for weight in args.grounding_state_weights:
        name = f"w{weight:g}-{'+'.join(tasks)}"
        progress.start(f"ground {name}", cfg.grounding_steps, unit="steps")
        checkpoint = grounding.train(
            train,
            Versions(args.out / name),
            version="1",
            base_model=cfg.model,
            steps=cfg.grounding_steps,
            batch_size=cfg.grounding_batch_size,
            base_layers=cfg.grounding_layers,
            state_target=cfg.state_target,
            state_loss_weight=weight,
            action_loss_weight=cfg.grounding_action_weight,
            tasks=tasks,
            action_size=discrete_action_size("ClevrRobot"),
            seed=cfg.seed,
            on_progress=progress.advance,
        )
        progress.finish()
        errors = one_step_errors(grounding.load(checkpoint), held_out)
        rows.append(
            {
                "state_loss_weight": weight,
                "tasks": tasks,
                "last_losses": checkpoint.result["last_losses"],
                "seconds": checkpoint.result["seconds"],
                "transitions": len(errors["dynamics"]),
                **{
                    f"{kind}_{stat}": float(fn(values))
                    for kind, values in errors.items()
                    for stat, fn in (("median", np.median), ("mean", np.mean))
                },
            }
        )
    return rows


def report(cfg: KalmConfig, args: argparse.Namespace, rows: list[dict]) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    own = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    settings = {
        **{k: v for k, v in own.items() if not k.startswith("_")},
        **cfg.model_dump(include=set(own)),  # the recipe's keys as validated
    }
    (args.out / "results.json").write_text(json.dumps({"settings": settings, "rows": rows}))

    table = Table(title=f"one-step error (L2 over 10 numbers), {rows[0]['transitions']} "
                  "held-out transitions")  # fmt: skip
    for column in ("state weight", "tasks", "dynamics prompt", "in a trajectory",
                   "nothing moved", "state loss (last 10%)", "action loss", "SFT s"):  # fmt: skip
        table.add_column(column)
    for row in rows:
        losses = row["last_losses"]
        table.add_row(
            f"{row['state_loss_weight']:g}",
            ",".join(row["tasks"]),
            f"{row['dynamics_median']:.3f} / {row['dynamics_mean']:.3f}",
            f"{row['trajectory_median']:.3f} / {row['trajectory_mean']:.3f}",
            f"{row['nothing moved_median']:.3f} / {row['nothing moved_mean']:.3f}",
            f"{losses.get('state', float('nan')):.4f}",
            f"{losses.get('action', float('nan')):.3f}",
            f"{row['seconds']:.0f}",
        )
    output_console().print(table)
    print("(median / mean)")


if __name__ == "__main__":
    sys.exit(main())
