"""Housekeep demonstrator on real episodes, and the datasets its demonstrations make.

Plays the `housekeep-demonstrator` planner on episodes of every validation scene (success
rate, soft score, steps, planner queries), builds the bootstrapping and self-training
datasets from demonstrations on training scenes, and measures symbolic steps per second.
Needs the Housekeep data: --data-dir, or $LLMRL_HOUSEKEEP_DATA, or `llmrl data get housekeep`.
Prints one JSON object on its last line.

    python bench/housekeep_demonstrator.py [--episodes-per-scene 50] [--train-episodes 100]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

from llmrl.agents import RolloutResources
from llmrl.annotator.chat_format import chat_jsonl_errors
from llmrl.annotator.datasets import write_dataset
from llmrl.common.datasets import missing_hint
from llmrl.recipes.llm_personalize.datasets import bootstrap_dataset, self_training_dataset
from llmrl.recipes.llm_personalize.demonstrations import demonstration_episode
from llmrl.simulator.envs.housekeep import default_data_dir
from llmrl.simulator.envs.housekeep.data import split_scenes


def find_data_dir(given: str | None) -> Path:
    for candidate in (given, default_data_dir()):
        if candidate and (Path(candidate) / "data.npy").exists():
            return Path(candidate)
    sys.exit(f"no Housekeep data: pass --data-dir, or {missing_hint('housekeep')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir",
        help="Housekeep data (default: $LLMRL_HOUSEKEEP_DATA, else the copy `llmrl data get "
        "housekeep` wrote)",
    )
    parser.add_argument(
        "--episodes-per-scene", type=int, default=50, help="validation episodes per scene"
    )
    parser.add_argument(
        "--train-episodes", type=int, default=60, help="training-split episodes to play"
    )
    args = parser.parse_args()
    data_dir = find_data_dir(args.data_dir)

    figures: dict[str, object] = {}
    steps = 0
    started = time.perf_counter()
    for scene in split_scenes(data_dir, "val"):
        records = [
            demonstration_episode(
                seed=i, env_kwargs={"data_dir": str(data_dir), "scene": scene, "episode": i}
            )
            for i in range(args.episodes_per_scene)
        ]
        steps += sum(r.length for r in records)
        figures[scene] = {
            "episodes": len(records),
            "success_rate": mean(r.metrics["success_rate"] for r in records),
            "object_success": mean(r.metrics["object_success"] for r in records),
            "soft_score": round(mean(r.metrics["soft_score"] for r in records), 4),
            "mean_steps": mean(r.length for r in records),
            "mean_queries": mean(len(r.llm_calls) for r in records),
        }
    elapsed = time.perf_counter() - started
    figures["demonstrator_steps_per_s"] = round(steps / elapsed, 1)

    train = {"data_dir": str(data_dir), "split": "train"}
    resources = RolloutResources()  # one world for every training episode
    try:
        demos = [
            demonstration_episode(seed=seed, env_kwargs=train, resources=resources)
            for seed in range(args.train_episodes)
        ]
    finally:
        resources.close()
    with tempfile.TemporaryDirectory() as out:
        for name, dataset in (
            ("bootstrap", bootstrap_dataset(demos)),
            ("self_training", self_training_dataset(demos)),
        ):
            paths = write_dataset(dataset, out, name)
            stats = dataset.stats
            figures[f"{name}_dataset"] = {
                "episodes": stats["episodes"],
                "queries": stats["queries"],
                "examples": stats["examples"],
                "dropped": stats["dropped"],
                "approx_tokens": stats["approx_tokens"],
                "valid_chat_jsonl": chat_jsonl_errors(paths["data"]) == [],
            }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
