"""ELLM's suggesters on CrafterText captions: how often are their goals feasible?

    .venv/bin/python -m llmrl.recipes.ellm.studies.suggesters [--captions 30] [--model M]

Collects `--captions` distinct state captions (with their structured states) from seeded
random play in CrafterText (seed `--seed`), asks every suggester (`llm` and `llm-score` through
the gateway's model `--model`, `oracle`, `all-goals`) for goals, and prints per suggester: goals
per caption, the share of its goals that are feasible now (the oracle's prerequisites hold), the
share of captions with at least one feasible goal, unparsable answers and LLM queries.
`--model` and `--seed` are the recipe's keys (`EllmConfig`). The last line is a JSON object of
the same figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from llmrl.llm_gateway.client import connect
from llmrl.recipes.ellm.config import EllmConfig
from llmrl.recipes.ellm.suggesters import feasible_goals, make_suggester
from llmrl.recipes.options import add_model_options, parse_model_options
from llmrl.simulator.envs.crafter.env import CrafterTextEnv

# the recipe's keys this study takes
RECIPE_KEYS = ["model", "seed"]
SUGGESTERS = ("llm", "llm-score", "oracle", "all-goals")


def collect(count: int, seed: int) -> list[tuple[str, dict]]:
    """Distinct (caption, state) pairs from random play (long episodes, several seeds)."""
    env, rng, seen = CrafterTextEnv(length=500), np.random.default_rng(seed), {}
    obs, _ = env.reset(seed=seed)
    while len(seen) < count:
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(17)))
        if obs["caption"] not in seen:
            seen[obs["caption"]] = {"inventory": obs["inventory"], "local_map": obs["local_map"]}
        if terminated or truncated:
            obs, _ = env.reset()
    return list(seen.items())


def suggester_figures(
    llm: Any,
    samples: Sequence[tuple[str, dict]],
    model: str,
    names: Sequence[str] = SUGGESTERS,
) -> dict[str, dict[str, Any]]:
    """Per suggester of `names`, its figures on `samples` (goals per caption, feasible share,
    captions with a feasible goal, unparsable answers, LLM queries); the LLM suggesters ask
    the gateway client `llm`'s model `model`."""
    rows = {}
    for name in names:
        kwargs = {"model": model, "run_id": "eval-ellm-suggesters"} if "llm" in name else {}
        suggester = make_suggester(name, connect_llm=lambda: llm, **kwargs)
        goals, feasible, any_feasible = [], [], []
        for caption, state in tqdm(samples, desc=name, unit="caption"):
            suggested = suggester.suggest(caption, state=state)
            possible = set(feasible_goals(state))
            goals.append(len(suggested))
            feasible += [goal in possible for goal in suggested]
            any_feasible.append(any(goal in possible for goal in suggested))
        counters = suggester.counters()
        rows[name] = {
            "goals_per_caption": round(float(np.mean(goals)), 2),
            "feasible_share": round(float(np.mean(feasible)), 3) if feasible else None,
            "captions_with_a_feasible_goal": round(float(np.mean(any_feasible)), 3),
            "unparsable": counters["unparsable"],
            "llm_queries": counters["asked"],
        }
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_options(parser, EllmConfig, RECIPE_KEYS)
    parser.add_argument("--captions", type=int, default=30, help="distinct captions to ask")
    args, config = parse_model_options(parser, EllmConfig, argv)
    if args.captions < 1:
        parser.error("--captions must be positive")
    samples = collect(args.captions, config.seed)
    # a loaded CPU may take minutes for a batch: the model's own timeout (60 s) is raised
    with connect(models={config.model: {"timeout_s": 900}}) as llm:
        rows = suggester_figures(llm, samples, config.model)
    print(f"{'suggester':<10} {'goals':>6} {'feasible':>9} {'any':>6} {'unparsable':>10}")
    for name, row in rows.items():
        share = "-" if row["feasible_share"] is None else f"{row['feasible_share']:.0%}"
        print(f"{name:<10} {row['goals_per_caption']:>6} {share:>9} "
              f"{row['captions_with_a_feasible_goal']:>6.0%} {row['unparsable']:>10}")  # fmt: skip
    print(json.dumps({"captions": len(samples), "model": config.model, **rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
