"""KALM's grounding, measured directly: how well the grounded LLM predicts CLEVR-Robot's next
state, for each grounding setting, without imagination or offline RL.

    .venv/bin/python evaluation/kalm_grounding.py                       # ~15 min on one core
    .venv/bin/python evaluation/kalm_grounding.py --weights 1 20 100 --steps 300
    .venv/bin/python evaluation/kalm_grounding.py --tasks dynamics --weights 1

Each setting grounds a fresh model with the learner's `kalm-grounding` algorithm (the recipe's
grounding phase, same code) on scripted-pusher episodes, then predicts the next state of every
transition of other, held-out episodes, twice: after the `dynamics` task's prompt (state,
action -> next state) and inside a trajectory prompt with the true states and actions before
it, the context imagination predicts in. Reported: the median and mean L2 error over the 10
numbers, beside the error of predicting "nothing moved" (the state before), and the last 10% of
each training loss. Writes results.json and the training episodes (train.npz, the `--data` of
`kalm_imagination.py`, whose instruction probe asks whether the grounding reads the
instruction) to --out.
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
from llmrl.learner.algorithms.grounding_sft import DEFAULTS as SFT_DEFAULTS
from llmrl.learner.llm.grounding import TASKS, dynamics_prompt, trajectory_prompt

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
    parser.add_argument("--episodes", type=int, default=300, help="scripted training episodes")
    parser.add_argument(
        "--test-episodes", type=int, default=60, help="held-out episodes (another seed)"
    )
    parser.add_argument("--noise", type=float, default=0.3, help="the scripted pusher's noise")
    parser.add_argument(
        "--goals-per-start", type=int, default=1,
        help="training episodes sharing a start state, each with its own goal (1: KALM's data)",
    )  # fmt: skip
    parser.add_argument(
        "--action-loss-weight", type=float, default=SFT_DEFAULTS["action_loss_weight"],
        help="weight of the action loss (KALM: 1)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=300, help="grounding SFT steps per setting")
    parser.add_argument("--batch-size", type=int, default=8, help="examples per SFT step")
    parser.add_argument(
        "--layers", type=int, default=4, help="keep the LLM's first N layers (0: all)"
    )
    parser.add_argument(
        "--state-target", choices=["absolute", "delta"], default="delta",
        help="what the state head predicts: the next state (KALM) or its change",
    )  # fmt: skip
    parser.add_argument(
        "--weights", type=float, nargs="+", default=[1.0, 20.0, 100.0],
        help="state_loss_weight values, one grounding each (KALM: 1)",
    )  # fmt: skip
    parser.add_argument(
        "--tasks", nargs="+", choices=list(TASKS), default=list(TASKS),
        help="the grounding tasks mixed in training (KALM: all four)",
    )  # fmt: skip
    parser.add_argument("--model", default="smollm2", help="base LLM (gateway model name)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and SFT")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/eval-kalm-grounding"),
        help="run directory: a grounding per setting and results.json",
    )  # fmt: skip
    args = parser.parse_args()
    if args.goals_per_start < 1:
        parser.error(f"--goals-per-start must be >= 1, got {args.goals_per_start}")
    if args.action_loss_weight <= 0:
        parser.error(f"--action-loss-weight must be > 0, got {args.action_loss_weight}")
    with torch_threads(args.torch_threads):
        rows = measure(args)
    report(args, rows)
    return 0


def measure(args: argparse.Namespace) -> list[dict]:
    """One grounding per state weight, each measured on the same held-out transitions."""
    from llmrl.common.registry import registry
    from llmrl.learner.algorithms.grounding_sft import dataset_episodes
    from llmrl.learner.versions import Versions
    from llmrl.orchestrator.embedded import make_progress
    from llmrl.recipes.kalm.collect import collect_clevr
    from llmrl.recipes.kalm.config import discrete_action_size

    train = collect_clevr(
        args.episodes, noise=args.noise, seed=args.seed, goals_per_start=args.goals_per_start
    )
    train.save(args.out / "train.npz")  # what kalm_imagination.py's --data wants
    test = collect_clevr(args.test_episodes, noise=args.noise, seed=args.seed + 1)
    held_out = dataset_episodes([test], WHOLE_EPISODES)
    grounding = registry.get_algorithm("kalm-grounding")
    progress = make_progress(output_console())
    rows = []
    for weight in args.weights:
        name = f"w{weight:g}-{'+'.join(args.tasks)}"
        progress.start(f"ground {name}", args.steps, unit="steps")
        checkpoint = grounding.train(
            train,
            Versions(args.out / name),
            version="1",
            base_model=args.model,
            steps=args.steps,
            batch_size=args.batch_size,
            base_layers=args.layers or None,
            state_target=args.state_target,
            state_loss_weight=weight,
            action_loss_weight=args.action_loss_weight,
            tasks=list(args.tasks),
            action_size=discrete_action_size("ClevrRobot"),
            seed=args.seed,
            on_progress=progress.advance,
        )
        progress.finish()
        errors = one_step_errors(grounding.load(checkpoint), held_out)
        rows.append(
            {
                "state_loss_weight": weight,
                "tasks": list(args.tasks),
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


def report(args: argparse.Namespace, rows: list[dict]) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
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
