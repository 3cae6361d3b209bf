"""ELLM on Housekeep: how well does the local model's yes/no judgement tell where objects
belong, on the validation scenes?

    .venv/bin/python evaluation/ellm_housekeep.py [--episodes 2] [--threshold 0.5] [--model M]

For each validation scene and episode (the real Housekeep data: `--data-dir`, else
$LLMRL_HOUSEKEEP_DATA or ../shared/data/housekeep), every object is paired with its correct
receptacles (positives, Housekeep's human annotations) and as many wrong ones drawn at random
(negatives), and the `PlacementJudge` gives P(yes) for each through the gateway. Printed: the
judge's accuracy, precision and recall of "belongs" at the threshold, the ROC AUC, the best
threshold on these pairs, and the precision of the `housekeep-llm` suggester's "pick up X"
suggestions at the start (X judged misplaced where it starts, against the truth). The last
line is a JSON object of the same figures, with the LLM calls and the gateway's cache hits.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
from tqdm import tqdm

from llmrl.llm_gateway.client import connect
from llmrl.recipes.ellm.housekeep import PlacementJudge
from llmrl.simulator.envs.housekeep import data as housekeep_data


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties: half)."""
    positives, negatives = scores[labels], scores[~labels]
    if not len(positives) or not len(negatives):
        return float("nan")
    greater = (positives[:, None] > negatives[None, :]).mean()
    ties = (positives[:, None] == negatives[None, :]).mean()
    return float(greater + 0.5 * ties)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="Housekeep data folder")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per validation scene")
    parser.add_argument("--threshold", type=float, default=0.5, help="P(yes) that 'belongs'")
    parser.add_argument("--model", default=None, help="gateway model (default: its default)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampled placements")
    args = parser.parse_args()
    beside = Path(__file__).resolve().parents[2] / "shared" / "data" / "housekeep"
    data_dir = (
        args.data_dir or housekeep_data.default_data_dir() or (beside if beside.exists() else None)
    )
    if data_dir is None:
        parser.error("no Housekeep data: pass --data-dir or set LLMRL_HOUSEKEEP_DATA")
    rng = random.Random(args.seed)
    pairs: list[tuple[str, str, str]] = []  # (object, receptacle, room)
    labels: list[bool] = []
    starts: list[tuple[int, bool]] = []  # (pair index of the start placement, misplaced)
    for scene in housekeep_data.split_scenes(data_dir, "val"):
        episodes = len(housekeep_data.load_episodes(data_dir, scene))
        for episode in range(min(args.episodes, episodes)):
            house = housekeep_data.load_house(data_dir, scene, episode)
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
    # a loaded CPU may take minutes for a batch: the model's own timeout (60 s) is raised
    with connect(models={args.model or "smollm2": {"timeout_s": 900}}) as llm:
        judge = PlacementJudge(llm, args.model, "eval-ellm-housekeep", timeout_s=900)
        values: list[float] = []
        for begin in tqdm(range(0, len(pairs), 16), desc="judging pairs", unit="batch"):
            values += judge.p_yes(pairs[begin : begin + 16])
    scores, truth = np.array(values), np.array(labels)
    said_yes = scores >= args.threshold
    thresholds = np.unique(scores)
    accuracies = [float(((scores >= t) == truth).mean()) for t in thresholds]
    best = int(np.argmax(accuracies))
    suggested = [i for i, _ in starts if scores[i] < args.threshold]  # "pick up X"
    misplaced = dict(starts)
    summary = {
        "model": args.model or "gateway default (SmolLM2-135M-Instruct)",
        "scenes": housekeep_data.split_scenes(data_dir, "val"),
        "episodes_per_scene": args.episodes,
        "pairs": len(pairs),
        "positives": int(truth.sum()),
        "threshold": args.threshold,
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
        "llm_calls": judge.asked,
        "gateway_cache_hits": judge.gateway_cache_hits,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
