"""ELLM on Housekeep: how well does the local model's yes/no judgement tell where objects
belong, on the validation scenes?

    .venv/bin/python -m llmrl.recipes.ellm.studies.housekeep [--episodes 2] \
        [--p-yes-threshold 0.5] [--model M] [--seed 0]

For each validation scene and episode (the real Housekeep data: `--data-dir`, else
$LLMRL_HOUSEKEEP_DATA or `llmrl data get housekeep`'s copy), every object is paired with its correct
receptacles (positives, Housekeep's human annotations) and as many wrong ones drawn at random
(negatives, seed `--seed`), and the `PlacementJudge` gives P(yes) for each through the
gateway's model `--model`. Printed: the judge's accuracy, precision and recall of "belongs" at
`--p-yes-threshold` (the `housekeep-llm` suggester's `threshold`, not the recipe's reward
threshold), the ROC AUC, the best threshold on these pairs, and the precision of the
`housekeep-llm` suggester's "pick up X" suggestions at the start (X judged misplaced where it
starts, against the truth). `--model` and `--seed` are the recipe's keys (`EllmConfig`). The
last line is a JSON object of the same figures, with the LLM calls and the gateway's cache hits.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from llmrl.common.datasets import missing_hint
from llmrl.llm_gateway.client import connect
from llmrl.recipes.ellm.config import EllmConfig
from llmrl.recipes.ellm.housekeep import PlacementJudge
from llmrl.recipes.options import add_model_options, parse_model_options
from llmrl.simulator.envs.housekeep import House
from llmrl.simulator.envs.housekeep import data as housekeep_data

# the recipe's keys this study takes
RECIPE_KEYS = ["model", "seed"]

Pair = tuple[str, str, str]  # (object, receptacle, room)


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties: half)."""
    positives, negatives = scores[labels], scores[~labels]
    if not len(positives) or not len(negatives):
        return float("nan")
    greater = (positives[:, None] > negatives[None, :]).mean()
    ties = (positives[:, None] == negatives[None, :]).mean()
    return float(greater + 0.5 * ties)


def val_houses(data_dir: str | Path, episodes: int) -> list[House]:
    """The houses of the first `episodes` episodes of every validation scene, in order."""
    houses = []
    for scene in housekeep_data.split_scenes(data_dir, "val"):
        count = len(housekeep_data.load_episodes(data_dir, scene))
        houses += [
            housekeep_data.load_house(data_dir, scene, e) for e in range(min(episodes, count))
        ]
    return houses


def placement_pairs(
    houses: Iterable[House], rng: random.Random
) -> tuple[list[Pair], list[bool], list[tuple[int, bool]]]:
    """(pairs, labels, starts): per object of each house, its correct receptacles (label
    True), as many wrong ones drawn by `rng` (False), then the receptacle it starts on;
    `starts` holds (that start pair's index, the object starts misplaced)."""
    pairs: list[Pair] = []
    labels: list[bool] = []
    starts: list[tuple[int, bool]] = []
    for house in houses:
        for o, obj in enumerate(house.objects):
            correct = set(house.allowed_receptacles(o))
            wrong = [r for r in house.receptacles if r.name not in correct]
            chosen = [r for r in house.receptacles if r.name in correct]
            chosen += rng.sample(wrong, min(len(chosen), len(wrong)))
            for receptacle in chosen:
                pairs.append((obj.name, receptacle.name, receptacle.room))
                labels.append(receptacle.name in correct)
            start = house.receptacles[house.start[o]]
            starts.append((len(pairs), start.name not in correct))
            pairs.append((obj.name, start.name, start.room))
            labels.append(start.name in correct)
    return pairs, labels, starts


def judge_pairs(judge: PlacementJudge, pairs: Sequence[Pair], batch: int = 16) -> list[float]:
    """P(yes) of every pair, asked `batch` pairs at a time."""
    values: list[float] = []
    for begin in tqdm(range(0, len(pairs), batch), desc="judging pairs", unit="batch"):
        values += judge.p_yes(pairs[begin : begin + batch])
    return values


def judge_figures(
    values: Sequence[float],
    labels: Sequence[bool],
    starts: Sequence[tuple[int, bool]],
    threshold: float,
) -> dict[str, Any]:
    """The judge's figures on the pairs (P(yes) `values` against `labels`) at `threshold`,
    and the "pick up X" suggestions at the start (`starts`, as `placement_pairs` gives)."""
    scores, truth = np.array(values), np.array(labels, dtype=bool)
    said_yes = scores >= threshold
    thresholds = np.unique(scores)
    accuracies = [float(((scores >= t) == truth).mean()) for t in thresholds]
    best = int(np.argmax(accuracies))
    suggested = [i for i, _ in starts if scores[i] < threshold]  # "pick up X"
    misplaced = dict(starts)
    return {
        "pairs": len(scores),
        "positives": int(truth.sum()),
        "threshold": threshold,
        "accuracy": round(float((said_yes == truth).mean()), 3),
        "precision_belongs": round(float(truth[said_yes].mean()), 3) if said_yes.any() else None,
        "recall_belongs": round(float(said_yes[truth].mean()), 3) if truth.any() else None,
        "roc_auc": round(roc_auc(scores, truth), 3),
        "p_yes_mean": {
            "positives": round(float(scores[truth].mean()), 3),
            "negatives": round(float(scores[~truth].mean()), 3),
        },
        "best_threshold_on_these_pairs": round(float(thresholds[best]), 3),
        "best_accuracy": round(accuracies[best], 3),
        "pick_up_suggestions_at_start": len(suggested),
        "pick_up_precision": round(float(np.mean([misplaced[i] for i in suggested])), 3)
        if suggested
        else None,
        "misplaced_share_at_start": round(float(np.mean(list(misplaced.values()))), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_options(parser, EllmConfig, RECIPE_KEYS)
    parser.add_argument("--data-dir", type=Path, default=None, help="Housekeep data folder")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per validation scene")
    parser.add_argument(
        "--p-yes-threshold",
        type=float,
        default=0.5,
        help="P(yes) at which an object 'belongs' (the housekeep-llm suggester's threshold)",
    )
    args, config = parse_model_options(parser, EllmConfig, argv)
    if args.episodes < 1:
        parser.error("--episodes must be positive")
    if not 0.0 <= args.p_yes_threshold <= 1.0:
        parser.error(
            f"--p-yes-threshold: expected a probability in [0, 1], got {args.p_yes_threshold}"
        )
    data_dir = args.data_dir or housekeep_data.default_data_dir()
    if data_dir is None:
        parser.error(f"no Housekeep data: pass --data-dir, or {missing_hint('housekeep')}")
    scenes = housekeep_data.split_scenes(data_dir, "val")
    pairs, labels, starts = placement_pairs(
        val_houses(data_dir, args.episodes), random.Random(config.seed)
    )
    # a loaded CPU may take minutes for a batch: the model's own timeout (60 s) is raised
    with connect(models={config.model: {"timeout_s": 900}}) as llm:
        judge = PlacementJudge(llm, config.model, "eval-ellm-housekeep", timeout_s=900)
        values = judge_pairs(judge, pairs)
    summary = {
        "model": config.model,
        "scenes": scenes,
        "episodes_per_scene": args.episodes,
        **judge_figures(values, labels, starts, args.p_yes_threshold),
        "llm_calls": judge.asked,
        "gateway_cache_hits": judge.gateway_cache_hits,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
