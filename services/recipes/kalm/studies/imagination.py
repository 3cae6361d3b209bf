"""KALM's imagination measured directly: each goal level and temperature, no offline RL.

What a grounded model imagines for each goal level, per sampling temperature and rollout count.

    .venv/bin/python -m llmrl.recipes.kalm.studies.imagination \\
        --grounding-from runs/eval-kalm-delta-sw20/grounding/1 \\
        --dataset runs/eval-kalm-delta-sw20/data/real.npz --imagine-temperatures 0 0.5 1 2

`--grounding-from` is a `kalm-grounding` version directory (a `kalm` run's
`grounding/<version>`, or one of `llmrl.recipes.kalm.studies.grounding`'s) and `--dataset` the
real dataset it was grounded on (the run's `data/real.npz`, or that study's `train.npz`), whose
episodes' first states are the imagined rollouts' starts; the checkpoint's numbers and
state_target are the config's. For each of `--imagine-levels` and `--imagine-temperatures` the
recipe's own imagination phase (`recipes/kalm/imagination.imagine_level`, same seed, same starts
and instructions) imagines `--imagined-per-level` rollouts of at most `--imagine-max-steps`, and
the table gives what the recipe reports: the share of valid rollouts, the rollouts the `goal`
filter keeps, the goal-match rate, the mean length, the median one-step error against the env's
physics and the share of kept rollouts whose actions reach the goal when replayed there. Beside
them, what no language model is needed for: uniformly random pushes (`--random-steps` of them,
in the env's own physics) from the same starts, and the share that meets the same goals, as the
`goal` filter counts it.

A second table asks whether the grounded action head follows the instruction at all. On
`--probe-episodes` of the data's own episodes it compares the head's first action (the argmax
after the trajectory prompt and the episode's first state) with the action the data took,
under the episode's own instruction and under another episode's; and on fresh pairs of a real
first state and an instruction of the training level or an imagined level, with the scripted
pusher's best push for that goal (the push the data's expert would make; unseen-hard goals
have none), its ball, and whether it pushes one of the two balls the goal names. A head that
reads the instruction changes its action with it; one that has memorised each start does not.
Writes results.json to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.table import Table

from llmrl.common.console import output_console
from llmrl.common.paths import allow_root
from llmrl.common.threads import torch_threads
from llmrl.recipes.config import ConfigError
from llmrl.recipes.kalm.config import KalmConfig
from llmrl.recipes.options import add_model_options, check_each_value, model_from_options

FIGURES = ("kept_share_valid", "kept", "goal_match", "mean_length", "one_step_error",
           "replay_goal_match_kept")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_options(
        parser,
        KalmConfig,
        ["grounding_from", "dataset", "imagine_levels", "imagined_per_level",
         "imagine_max_steps", "seed"],
        defaults={"imagined_per_level": 2048, "imagine_max_steps": 6},
    )  # fmt: skip
    parser.add_argument(
        "--imagine-temperatures",
        type=float,
        nargs="+",
        default=[0.0, 1.0],
        help="imagine_temperature values, one imagination per level each (0: the action "
        "head's argmax, KALM's)",
    )
    parser.add_argument(
        "--random-steps",
        type=int,
        default=4,
        help="random pushes per start in the baseline (imagined rollouts: 3.5-3.8 steps)",
    )
    parser.add_argument(
        "--probe-episodes", type=int, default=256, help="pairs of the instruction probe"
    )
    parser.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/eval-kalm-imagination"), help="results folder"
    )
    args = parser.parse_args()
    if min(args.probe_episodes, args.random_steps) < 1:
        parser.error("--probe-episodes and --random-steps must be >= 1")
    for flag, named in (("--grounding-from", args.grounding_from), ("--dataset", args.dataset)):
        if named is None:
            parser.error(f"{flag}: required; name a kalm run's outputs")
        path = Path(str(named))
        if not path.exists():
            parser.error(f"{flag}: {path}: no such file or directory; name a kalm run's outputs")
        allow_root(path.parent)  # named on this command line, like --out
    grounded_with = checkpoint_settings(args.grounding_from)
    try:
        cfg = model_from_options(KalmConfig, args, **grounded_with)
        for temperature in args.imagine_temperatures:
            check_each_value(KalmConfig, args, "imagine_temperature", temperature, **grounded_with)
    except ConfigError as exc:
        parser.error(str(exc))

    from llmrl.learner.algorithms import load_cached
    from llmrl.recipes.kalm.training import load_datasets

    real = load_datasets([str(cfg.dataset)])
    if real.env != "ClevrRobot":
        parser.error(f"--dataset: {cfg.dataset} holds {real.env} data; this measures ClevrRobot's")
    with torch_threads(args.torch_threads):
        rows, following = measure(
            cfg, args, load_cached("kalm-grounding", cfg.grounding_from), real
        )
    args.out.mkdir(parents=True, exist_ok=True)
    own = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    settings = {
        **{k: v for k, v in own.items() if not k.startswith("_")},
        **cfg.model_dump(include={*own, *grounded_with}),  # the recipe's keys as validated
    }
    results = {"settings": settings, "rows": rows, "instruction_following": following}
    (args.out / "results.json").write_text(json.dumps(results))
    table = Table(title=f"imagination, {cfg.imagined_per_level} rollouts per level and temperature")
    for column in ("level", "temperature", "valid", "kept (goal met)", "goal match",
                   "mean length", "one-step error", "kept right on replay",
                   f"random pushes meeting the goal (<= {args.random_steps})"):  # fmt: skip
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["level"],
            f"{row['temperature']:g}",
            f"{row['kept_share_valid']:.0%}",
            str(row["kept"]),
            f"{row['goal_match']:.1%}",
            f"{row['mean_length']:.2f}",
            _number(row["one_step_error"], "{:.3f}"),
            _number(row["replay_goal_match_kept"], "{:.0%}"),
            f"{row['random_pushes_goal']:.1%}",
        )
    output_console().print(table)
    probe = Table(title="does the action head read the instruction? (first action, argmax)")
    for column in ("pairs", "matches", "share"):
        probe.add_column(column)
    for name, share in following.items():
        pairs, _, matches = name.partition(": ")
        probe.add_row(pairs, matches, _number(share, "{:.0%}"))
    output_console().print(probe)
    return 0


def checkpoint_settings(path: object) -> dict[str, str]:
    """The numbers and state_target the checkpoint at `path` was grounded with, which the
    config takes (KalmConfig checks a `grounding_from` against them); none when it has no
    readable metadata (the config's check then says why)."""
    from llmrl.learner.versions import Checkpoint

    try:
        saved = Checkpoint.read(str(path)).config
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
    return {key: saved[key] for key in ("numbers", "state_target") if key in saved}


def measure(
    cfg: KalmConfig, args: argparse.Namespace, grounded, real
) -> tuple[list[dict], dict[str, float]]:
    """The imagination table's rows (each level and temperature) and the instruction probe."""
    from llmrl.recipes.kalm.imagination import imagination_env, imagine_level

    env = imagination_env(real.env, real)
    count = cfg.imagined_per_level
    rows = []
    for level in cfg.imagine_levels:
        random_share = random_pushes_meet_goal(env, level, count, cfg.seed, args.random_steps)
        for temperature in args.imagine_temperatures:
            started = time.monotonic()
            _, figures = imagine_level(
                grounded, real, env, level, count=count, max_steps=cfg.imagine_max_steps,
                seed=cfg.seed, imagined_filter="goal", temperature=temperature,
            )  # fmt: skip
            rows.append(
                {
                    "level": level,
                    "temperature": temperature,
                    **{k: figures.get(k) for k in FIGURES},
                    "random_pushes_goal": random_share,
                    "seconds": round(time.monotonic() - started, 1),
                }
            )
    levels = list(cfg.imagine_levels)
    return rows, instruction_following(grounded, real, env, levels, args.probe_episodes)


def random_pushes_meet_goal(env, level: str, count: int, seed: int, steps: int) -> float:
    """The share of the imagination's own (start, goal) pairs (the same seeded stream) where
    `steps` uniformly random pushes in the env's physics meet the goal at some step."""
    from llmrl.recipes.kalm.imagination import level_pairs, level_rng
    from llmrl.simulator.envs.clevr_robot import NUM_ACTIONS

    goals, _, starts = level_pairs(env, level, count, level_rng(seed, level))
    pushes = np.random.default_rng([seed, steps])
    met = 0
    for goal, state in zip(goals, starts, strict=True):
        for _ in range(steps):
            state = env.step(state, int(pushes.integers(NUM_ACTIONS)))
            if env.success(level, state, goal):
                met += 1
                break
    return met / count


def first_actions(model, prompts: list) -> np.ndarray:
    """The action head's argmax after each prompt (batches of 32)."""
    import torch

    with torch.no_grad():
        hidden = torch.cat(
            [model.last_hidden(prompts[i : i + 32]) for i in range(0, len(prompts), 32)]
        )
        return model.predict_action(hidden)[0]  # greedy: the argmax, as imagination takes it


def instruction_following(model, real, env, levels: list[str], count: int) -> dict[str, float]:
    """The instruction probe (module doc): shares of first actions that match."""
    from llmrl.recipes.kalm.collect import ScriptedPusher
    from llmrl.recipes.kalm.grounded_lm import trajectory_prompt
    from llmrl.recipes.kalm.imagination import level_rng
    from llmrl.simulator.envs.clevr_robot import named_balls

    rng = np.random.default_rng(0)
    episodes = list(real.episodes())
    chosen = [episodes[i] for i in rng.choice(len(episodes), min(count, len(episodes)), False)]
    others = [episodes[i] for i in rng.integers(len(episodes), size=len(chosen))]
    taken = np.array([int(e.actions[0]) for e in chosen])

    def prompt(text: str, state: np.ndarray) -> list:
        return [*trajectory_prompt(str(text)), ("state", state, False)]

    own = first_actions(model, [prompt(e.instruction, e.observations[0]) for e in chosen])
    swapped = first_actions(
        model,
        [prompt(o.instruction, e.observations[0]) for e, o in zip(chosen, others, strict=True)],
    )
    figures = {
        "data's episodes, own instruction: the action the data took": float(np.mean(own == taken)),
        "data's episodes, another's instruction: the same action as under its own": float(
            np.mean(swapped == own)
        ),
        "data's episodes, another's instruction: the action the data took": float(
            np.mean(swapped == taken)
        ),
    }
    pusher = ScriptedPusher(noise=0.0)
    for level in ["training", *levels]:  # training: the instructions the grounding saw
        if level == "unseen-hard":
            continue  # multi-ball goals: the scripted pusher has no single best push
        level_stream = level_rng(1, level)
        pairs = env.goals(level)
        prompts, best, named = [], [], []
        for _ in range(count):
            goal, text = pairs[level_stream.integers(len(pairs))]
            start, goal = env.initial_state(level, goal, level_stream)
            prompts.append(prompt(text, start))
            best.append(pusher.best_push(start, goal))
            named.append(named_balls(goal))
        chosen_actions, best_actions = first_actions(model, prompts), np.array(best)
        figures[f"fresh {level} pairs: the scripted pusher's best push"] = float(
            np.mean(chosen_actions == best_actions)
        )
        figures[f"fresh {level} pairs: the ball it pushes"] = float(
            np.mean(chosen_actions // 8 == best_actions // 8)
        )
        figures[f"fresh {level} pairs: a ball the goal names (chance 40%)"] = float(
            np.mean([a // 8 in balls for a, balls in zip(chosen_actions, named, strict=True)])
        )
    return figures


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


if __name__ == "__main__":
    sys.exit(main())
