"""When2Ask evaluation episodes/s with the planner's privileged entries read at its queries
only, versus read at every step.

The noisy oracle reads two privileged entries (`oracle_plan`, `feasible_skills`: a search of
the grid each). The evaluation driver reads them only at the steps that query the planner
(`EpisodeDriver.on_demand_observations`; always-ask, which queries at every step, still reads
them with the step); before, the rollout loop asked for them with every step, which the
driver's `"planner_entries": "every_step"` keeps for this comparison. Both play the
same seeded episodes through `run_episode` (same steps, same queries:
`tests/recipes/when2ask/test_asking_rules.py`), in alternating rounds (the order flipped every
round) so that load from other processes hurts both alike; the ratio is the median of the
per-round ratios. Always-ask does the same work both ways: its ratio is the noise floor.
The last line printed is one JSON object with every figure.

    python bench/when2ask_eval.py                  # ~1 minute on 2 cores
    python bench/when2ask_eval.py --episodes 50 --rounds 7 --methods forced-only
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import llmrl.recipes.when2ask.driver  # noqa: F401  (registers the "when2ask" kind)
from llmrl.agents import EpisodeJob, RolloutResources, run_episode

EVERY_STEP = "every_step"  # the driver's `planner_entries`: the loop as it was


def episodes_per_second(
    entries: str, method: str, args: argparse.Namespace, resources: RolloutResources
) -> float:
    policy = {
        "kind": "when2ask",
        "ask": {"method": method},
        "planner": {"name": "noisy-oracle", "kwargs": {"p": args.noise, "seed": 0}},
        "planner_entries": entries,
    }
    started = time.perf_counter()
    for index in range(args.episodes):
        job = EpisodeJob(
            "bench", f"b/{index}", args.env, seed=index, policy=policy, max_steps=args.max_steps
        )
        run_episode(job, resources)
    return args.episodes / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="ColoredDoorKey", help="When2Ask task to play")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["forced-only", "news-or-skill-end", "always"],
        help="fixed asking rules to play, each measured on its own",
    )
    parser.add_argument("--noise", type=float, default=0.2, help="noisy planner's p")
    parser.add_argument("--max-steps", type=int, default=25, help="mediator steps per episode")
    parser.add_argument("--episodes", type=int, default=20, help="episodes per mode per round")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds")
    args = parser.parse_args()

    resources = RolloutResources()
    figures: dict[str, Any] = {"env": args.env, "episodes": args.episodes, "rounds": args.rounds}
    try:
        for method in args.methods:
            episodes_per_second("at_queries", method, args, resources)  # warm-up: world, imports
            now, before = [], []
            for round_index in range(args.rounds):
                # the order flips every round, so a drift in the machine's load favours neither
                for entries in (EVERY_STEP, "at_queries")[:: 1 if round_index % 2 else -1]:
                    rate = episodes_per_second(entries, method, args, resources)
                    (before if entries == EVERY_STEP else now).append(rate)
            ratio = statistics.median(a / b for a, b in zip(now, before, strict=True))
            figures[method] = {
                "on_demand_episodes_per_s": round(statistics.median(now), 2),
                "every_step_episodes_per_s": round(statistics.median(before), 2),
                "speedup": round(ratio, 3),
            }
            print(f"{method} on {args.env}: {ratio:.3f}x the episodes/s", flush=True)
    finally:
        resources.close()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
