"""KALM's environments and data, measured: our CLEVR-Robot against KALM's released data, and the
scripted collectors' success per level and noise.

    .venv/bin/python -m llmrl.recipes.kalm.studies.data           # ~5 min on 2 loaded cores
    .venv/bin/python -m llmrl.recipes.kalm.studies.data --scripted-episodes 200 \\
        --metaworld-episodes 3

Prints (and writes to --out: results.json, physics_agreement.png, collectors.png):

* physics agreement: every real transition of the released `clevr_robot.npy` (the recipe's
  `--released-path`, by default $LLMRL_KALM_DATA or `llmrl data get kalm`'s copy) replayed from
  its recorded state in our 2-D physics; how often our push moves the pushed ball within 45° of
  the recorded way, and the ratio of the distances;
* label agreement: the released success labels (terminals) against our success function;
* the scripted pusher's success rate and mean episode length per level and noise
  (`--scripted-episodes` per level and noise, at each of `--scripted-noises`);
* Meta-World's experts' success rate per task and noise level (--metaworld-episodes per cell,
  0 to skip).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from rich.table import Table

from llmrl.common.console import output_console
from llmrl.common.datasets import missing_hint
from llmrl.common.paths import allow_root
from llmrl.common.plots import pyplot
from llmrl.common.safe_numpy import load_npy
from llmrl.recipes.config import ConfigError
from llmrl.recipes.kalm import collect, released
from llmrl.recipes.kalm.config import KalmConfig
from llmrl.recipes.options import add_model_options, check_each_value, model_from_options
from llmrl.simulator.envs import clevr_robot


def displacement_pairs(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(recorded, ours): the pushed ball's displacement in each real released transition."""
    data = load_npy(path).item()
    recorded, ours = [], []
    for t, k in zip(*np.nonzero(data["masks"] > 0), strict=True):
        state, action = data["observations"][t, k], int(data["actions"][t, k])
        ball, _ = clevr_robot.split_action(action)
        recorded.append((data["next_observations"][t, k] - state).reshape(-1, 2)[ball])
        ours.append((clevr_robot.push(state, action) - state).reshape(-1, 2)[ball])
    return np.array(recorded), np.array(ours)


def plot_agreement(recorded: np.ndarray, ours: np.ndarray, path: Path) -> None:
    plt = pyplot()

    lengths = np.linalg.norm(recorded, axis=1)
    pushes = lengths > 0.05
    angles = np.degrees(
        np.arctan2(
            recorded[:, 0] * ours[:, 1] - recorded[:, 1] * ours[:, 0],
            (recorded * ours).sum(axis=1),
        )
    )
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.hist(angles[pushes], bins=np.arange(-180, 181, 10))
    left.axvspan(-45, 45, alpha=0.15, color="green", label="within 45°")
    left.set(xlabel="angle ours vs recorded (degrees)", ylabel="released pushes")
    left.legend()
    right.scatter(lengths[pushes], np.linalg.norm(ours[pushes], axis=1), s=6)
    right.plot([0, 0.45], [0, 0.45], "k--", lw=1)
    right.set(xlabel="recorded push length", ylabel="our push length")
    figure.suptitle("KALM's released CLEVR-Robot transitions replayed in our physics")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_collectors(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    noises = sorted({row["noise"] for row in rows})
    levels = list(dict.fromkeys(row["level"] for row in rows))
    figure, axis = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(noises)
    for n, noise in enumerate(noises):
        rates = [
            next(r["success"] for r in rows if r["level"] == level and r["noise"] == noise)
            for level in levels
        ]
        axis.bar(np.arange(len(levels)) + n * width, rates, width, label=f"noise {noise}")
    axis.set_xticks(np.arange(len(levels)) + width * (len(noises) - 1) / 2, levels)
    axis.set(ylabel="success rate", ylim=(0, 1.05), title="CLEVR-Robot scripted pusher")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def clevr_collector_rows(episodes: int, noises: list[float], seed: int) -> list[dict]:
    rows = []
    for level in clevr_robot.LEVELS:
        for noise in noises:
            dataset = collect.collect_clevr(episodes, level=level, noise=noise, seed=seed)
            ends = dataset.episode_bounds()[1:] - 1
            rows.append(
                {
                    "level": level,
                    "noise": noise,
                    "episodes": dataset.num_episodes,
                    "success": float(dataset.terminals[ends].mean()),
                    "mean_length": float(np.diff(dataset.episode_bounds()).mean()),
                }
            )
            print(f"  clevr {level} noise {noise}: {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def metaworld_rows(episodes: int, noises: list[float], seed: int) -> list[dict]:
    from llmrl.simulator.envs.metaworld_tasks import TASKS, level_of

    rows = []
    for task in TASKS:
        row = {"task": task, "level": level_of(task)}
        for noise in noises:
            dataset = collect.collect_metaworld(
                [task], episodes, noise_levels=(noise,), seed=seed, num_envs=1
            )
            ends = dataset.episode_bounds()[1:] - 1
            row[f"noise {noise}"] = float(dataset.terminals[ends].mean())
        print(f"  metaworld {row}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_options(
        parser,
        KalmConfig,
        ["released_path", "scripted_episodes", "seed"],
        defaults={"scripted_episodes": 100},  # per level and noise
    )
    parser.add_argument(
        "--scripted-noises",
        type=float,
        nargs="+",
        default=[0.0, 0.2, 0.5],
        help="scripted_noise values, one collection per level each: the scripted pusher's "
        "probabilities of a random push",
    )
    parser.add_argument("--metaworld-episodes", type=int, default=2, help="per task and noise")
    parser.add_argument(
        "--metaworld-noises",
        type=float,
        nargs="+",
        default=[0.0, 0.3, 1.0],
        help="Meta-World experts: standard deviations of the action noise",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/kalm_data"), help="output folder")
    args = parser.parse_args()
    if args.released_path is not None:  # named on this command line, like --out
        allow_root(Path(str(args.released_path)).expanduser().resolve().parent)
    try:
        cfg = model_from_options(KalmConfig, args)
        for noise in args.scripted_noises:
            check_each_value(KalmConfig, args, "scripted_noise", noise)
    except ConfigError as exc:
        parser.error(str(exc))
    if cfg.released_path is None and released.released_dir() is None:
        parser.error(f"--released-path: no KALM data found: set it, or {missing_hint('kalm')}")
    clevr_file = released.released_file(released.CLEVR_FILE, cfg.released_path)
    if not clevr_file.is_file():
        parser.error(f"--released-path: {clevr_file}: no such file (KALM's {released.CLEVR_FILE})")
    args.out.mkdir(parents=True, exist_ok=True)
    console = output_console()

    physics = released.physics_agreement(clevr_file)
    labels = released.label_agreement(clevr_file)
    plot_agreement(*displacement_pairs(clevr_file), args.out / "physics_agreement.png")
    console.print(released.describe(physics))
    console.print(released.describe(labels))

    clevr_rows = clevr_collector_rows(cfg.scripted_episodes, args.scripted_noises, cfg.seed)
    plot_collectors(clevr_rows, args.out / "collectors.png")
    table = Table(title="CLEVR-Robot scripted pusher")
    for column in ("level", "noise", "episodes", "success", "mean length"):
        table.add_column(column)
    for row in clevr_rows:
        table.add_row(
            row["level"],
            f"{row['noise']}",
            f"{row['episodes']}",
            f"{row['success']:.2f}",
            f"{row['mean_length']:.1f}",
        )
    console.print(table)

    mw_rows = []
    if args.metaworld_episodes:
        mw_rows = metaworld_rows(args.metaworld_episodes, args.metaworld_noises, cfg.seed)
        table = Table(title=f"Meta-World experts: success ({args.metaworld_episodes} episodes)")
        for column in ("task", "level", *[f"noise {n}" for n in args.metaworld_noises]):
            table.add_column(column)
        for row in mw_rows:
            values = [f"{row[f'noise {n}']:.2f}" for n in args.metaworld_noises]
            table.add_row(row["task"], row["level"], *values)
        console.print(table)

    results = {
        "physics_agreement": vars(physics) | {"rate": physics.rate},
        "label_agreement": vars(labels),
        "clevr_collectors": clevr_rows,
        "metaworld_experts": mw_rows,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    console.print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
