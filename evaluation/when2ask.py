"""When2Ask evaluation: the four MiniGrid tasks, every method, the issue's target checked.

    .venv/bin/python evaluation/when2ask.py --planner oracle
    .venv/bin/python evaluation/when2ask.py --planner local --episodes 30 --train-steps 4000

Runs the `when2ask` recipe in embedded mode and prints its table (the paper's Table 1 beside
the measured figures) and, per task, whether the learned mediator's success is within 2 points
of always-ask while using at most 20% of its queries. The figures are reported as measured;
the exit status is 0 whether or not the target holds (use --strict to fail when it does not).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.base import read_results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--planner", choices=["oracle", "local", "llm"], default="oracle")
    parser.add_argument("--planner-model", default=None, help="gateway model for local/llm")
    parser.add_argument("--envs", nargs="+", default=None, help="tasks (default: all four)")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes/method")
    parser.add_argument("--train-steps", type=int, default=20_000, help="PPO steps, asking")
    parser.add_argument("--never-ask-steps", type=int, default=20_000, help="PPO steps, baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="default runs/eval-when2ask-<p>")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target misses")
    args = parser.parse_args()

    config = {
        "planner": args.planner,
        "planner_model": args.planner_model,
        "eval_episodes": args.episodes,
        "train_steps": args.train_steps,
        "never_ask_steps": args.never_ask_steps,
        "seed": args.seed,
    }
    if args.envs:
        config["envs"] = args.envs
    out = args.out or Path("runs") / f"eval-when2ask-{args.planner}"
    run_embedded("when2ask", config, out_dir=out, progress=True)
    results = read_results(out)
    if results is None:
        print(f"no results in {out}", file=sys.stderr)
        return 1
    verdicts = [note for note in results.notes if note.startswith("target on ")]
    summary = {
        "planner": args.planner,
        "target_met": all(v.endswith(": met") for v in verdicts) if verdicts else None,
        "rows": results.rows,
    }
    print("\n".join(verdicts))
    print(json.dumps(summary, default=float))
    return 1 if args.strict and not summary["target_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
