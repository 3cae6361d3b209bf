"""LLM-Personalize evaluation: the local SmolLM2 planner personalised to the val scenes.

    .venv/bin/python evaluation/llm_personalize.py       # the full run (hours on 2 CPU cores)
    .venv/bin/python evaluation/llm_personalize.py --train-episodes 20 --eval-episodes 10 \
        --collect-samples 8                                  # larger still

Runs the `llm-personalize` recipe in embedded mode (zero-shot, bootstrap SFT on demonstrations,
`--rounds` self-training rounds) and checks, on the mean over the scenes, the issue's target:
round 2 > bootstrap > zero-shot in success rate on the held-out episodes (`target_met`; null
with fewer than 2 rounds, which cannot meet it); beside it, per split (training and held-out
episodes), whether bootstrap beats zero-shot and the last round is at least as good as
bootstrap (`checks`). It also prints what each self-training round
selected (collected episodes and queries, episodes that raised correct placements, examples),
then the counts behind the rates (`llm_personalize/analysis.py`): completed pick-ups and
placements and the episodes that raised or lowered correct placements, per phase and split;
the skills each SFT dataset teaches; and the held-out misplaced objects whose category training
episodes had misplaced. Every stage plays the same evaluation episodes, so each step of the
ladder is also measured episode by episode: the mean paired difference with its 95% bootstrap
interval, and `target_beyond_noise` says whether both of the target's steps (bootstrap over
zero-shot, round 2 over bootstrap, held out) have intervals above 0. The tables are printed as
measured; the exit status is 0 whether or
not the target holds (--strict: 1 when it does not, or cannot be checked). A run interrupted
(Ctrl-C) resumes when started again with the same arguments and --out; a finished one is read
back and its tables printed again, without running anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmrl.common.store import RunStore
from llmrl.llm_gateway.settings import use_patient_config
from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.base import Results, read_results, recipe_class, validate_config
from llmrl.recipes.llm_personalize.analysis import (
    paired_differences,
    phase_behaviour,
    shared_categories,
    target_verbs,
)
from llmrl.recipes.llm_personalize.config import stage_name

VERB_COLUMNS = ("go_to_room", "go_to", "look_at", "pick_up", "place", "mission_complete")
RUNNER_OPTIONS = (
    "torch_threads",
    "gateway_timeout_s",
    "out",
    "strict",
)  # not part of the recipe's config


def compared_round(rounds: int) -> str | None:
    """The results column the target compares: round 2, or the last round of fewer."""
    return f"round {min(rounds, 2)}" if rounds else None


def summary_rows(rows: list[dict]) -> list[dict]:
    """The rows the target is checked on: the "all" rows, else the only scene's."""
    scenes = {row["scene"] for row in rows}
    wanted = "all" if "all" in scenes else next(iter(scenes))
    return [row for row in rows if row["scene"] == wanted]


def verdicts(rows: list[dict], rounds: int) -> dict[str, dict[str, bool]]:
    """Per split: bootstrap > zero-shot, and (with rounds) the compared round >= bootstrap."""
    last = compared_round(rounds)
    out = {}
    for row in summary_rows(rows):
        checks = {"bootstrap > zero-shot": row["bootstrap"] > row["zero-shot"]}
        if last is not None:  # --rounds 0: there is no round to compare
            checks[f"{last} >= bootstrap"] = row[last] >= row["bootstrap"]
        out[row["episodes"]] = checks
    return out


def held_out_ladder(rows: list[dict], rounds: int) -> bool | None:
    """round 2 (or the last round) > bootstrap > zero-shot on the held-out episodes."""
    last = compared_round(rounds)
    if last is None:
        return None
    for row in summary_rows(rows):
        if row["episodes"] == "held-out":
            return bool(row[last] > row["bootstrap"] > row["zero-shot"])
    return None


def target_met(rows: list[dict], rounds: int) -> bool | None:
    """The issue's target, round 2 > bootstrap > zero-shot held out; None below 2 rounds."""
    return held_out_ladder(rows, rounds) if rounds >= 2 else None


def target_line(met: bool | None) -> str:
    if met is None:
        return "not checked (it needs --rounds 2 or more)"
    return "met" if met else "not met"


def ladder_comparisons(rounds: int) -> list[tuple[str, str]]:
    """The stage pairs measured episode by episode: each stage against the one before it,
    and the target's round 2 (or the last round) against bootstrap."""
    names = ["zero-shot", "bootstrap", *(f"round {k}" for k in range(1, rounds + 1))]
    pairs = list(zip(names[1:], names[:-1], strict=True))
    last = compared_round(rounds)
    if last is not None and (last, "bootstrap") not in pairs:
        pairs.append((last, "bootstrap"))
    return pairs


def target_beyond_noise(differences: list[dict], rounds: int) -> bool | None:
    """Both of the target's held-out steps gain beyond noise (intervals above 0)."""
    if rounds < 2:
        return None
    wanted = {"bootstrap - zero-shot", f"{compared_round(rounds)} - bootstrap"}
    held_out = [
        row for row in differences if row["episodes"] == "held-out" and row["comparison"] in wanted
    ]
    if len(held_out) < len(wanted):
        return None
    return all(row["beyond_noise"] and row["mean"] > 0 for row in held_out)


def episode_differences(out: Path, run_id: str, config: dict) -> list[dict]:
    """Paired per-episode differences of success rate between stages (see the docstring)."""
    recipe = recipe_class("llm-personalize")(validate_config("llm-personalize", config))
    splits = [split for _, split, _ in recipe.eval_set()]
    success = {}
    store = RunStore(out / "run.sqlite")
    try:
        for stage in recipe.stages():
            records = store.episodes(run_id, phase=f"evaluate/{stage}")
            if len(records) == len(splits):  # an unfinished stage is left out
                success[stage_name(stage)] = [r.metrics["success_rate"] for r in records]
    finally:
        store.close()
    return paired_differences(success, splits, ladder_comparisons(recipe.config.rounds))


def table(title: str, rows: list[dict]) -> str:
    return Results(title=title, rows=rows).to_markdown() if rows else ""


def selection_table(out: Path) -> str:
    """Per stage: the data its annotate phase made (the report's selection.json)."""
    path = out / "selection.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    return table("Data per stage", rows)


def behaviour_tables(out: Path, run_id: str, config: dict) -> str:
    """What the planner did behind each success rate (`llm_personalize/analysis.py`)."""
    recipe = recipe_class("llm-personalize")(validate_config("llm-personalize", config))
    cfg = recipe.config
    evaluation_splits = [split for _, split, _ in recipe.eval_set()]
    phases = ["demonstrate", *(f"collect/{k}" for k in range(1, cfg.rounds + 1))]
    phases += [f"evaluate/{stage}" for stage in recipe.stages()]
    store = RunStore(out / "run.sqlite")
    try:
        behaviour = []
        for phase in phases:
            records = store.episodes(run_id, phase=phase)
            evaluated = phase.startswith("evaluate/")
            splits = evaluation_splits if evaluated else ["train"] * len(records)
            behaviour += phase_behaviour(phase, records, splits)
    finally:
        store.close()
    datasets = {"bootstrap": out / "datasets" / "bootstrap.jsonl"}
    datasets |= {
        f"round {k}": out / "datasets" / f"round-{k}.jsonl" for k in range(1, cfg.rounds + 1)
    }
    verbs = []
    for name, path in datasets.items():
        if path.exists():
            counts = target_verbs(path)
            verbs.append({"dataset": name, **{verb: counts[verb] for verb in VERB_COLUMNS}})
    return "\n".join(
        [
            table("Completed skills and placement changes per phase and split", behaviour),
            table("Target plan lines of each SFT dataset, by skill", verbs),
            table(
                "Held-out misplaced objects whose category a training episode had misplaced",
                shared_categories(cfg),
            ),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2", help="gateway model (hf backend)")
    parser.add_argument("--scenes", nargs="+", default=None, help="default: the val scenes")
    parser.add_argument(
        "--train-episodes",
        type=int,
        default=8,
        help="training episodes per scene (demonstrated, collected on)",
    )
    parser.add_argument(
        "--collect-episodes",
        type=int,
        default=0,
        help="training episodes per scene each round collects on, the first N (0: all)",
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=4,
        help="evaluation episodes per scene and split (train, held-out)",
    )
    parser.add_argument(
        "--collect-samples",
        type=int,
        default=4,
        help="sampled episodes per training episode in each round (seeded, each its own)",
    )
    parser.add_argument(
        "--collect-temperature", type=float, default=0.7, help="sampling temperature, collecting"
    )
    parser.add_argument(
        "--selection",
        choices=["episode", "query"],
        default="episode",
        help="self-training keeps the queries of episodes that raised correct placements "
        "(episode) or only the queries whose own steps did (query)",
    )
    parser.add_argument(
        "--replay-rounds",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="round k also trains on rounds 1..k-1's selections",
    )
    parser.add_argument(
        "--demo-query-every-step",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="ask the demonstrator at every step (its whole plan logged, its first skill "
        "played), so that every state of a demonstration is an example",
    )
    parser.add_argument(
        "--bootstrap-dedupe",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep identical demonstrated (prompt, plan) pairs once in the bootstrap data "
        "(the default keeps every demonstrated query, so each situation weighs as often as met)",
    )
    parser.add_argument(
        "--replay-bootstrap",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="self-training rounds also train on the bootstrap data (--no-replay-bootstrap: "
        "a round trains on its selections only, and keeps the previous model when it has none)",
    )
    parser.add_argument(
        "--replay-bootstrap-examples",
        type=int,
        default=0,
        help="replay at most this many bootstrap examples per round, a seeded random subset "
        "(0: all of them; the whole bootstrap data costs every round its SFT time again)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="self-training rounds (the target compares round 2)"
    )
    parser.add_argument("--max-steps", type=int, default=30, help="skill steps per episode")
    parser.add_argument("--max-tokens", type=int, default=80, help="tokens per planner answer")
    parser.add_argument(
        "--demo-plan-length",
        type=int,
        default=5,
        help="skills per demonstrator plan (SFT target length)",
    )
    parser.add_argument(
        "--planner-mode",
        choices=["generate", "score"],
        default="generate",
        help="generate: the model writes plans; score: it picks the feasible skill it scores best",
    )
    parser.add_argument("--few-shot", action="store_true", help="worked example in prompts")
    parser.add_argument(
        "--guided",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="guided decoding: plan lines only name skills over known names (default: on)",
    )
    parser.add_argument("--guided-max-lines", type=int, default=5, help="plan lines per query")
    parser.add_argument(
        "--sft-epochs",
        type=float,
        default=3.0,
        help="SFT passes over the data when --sft-steps is 0",
    )
    parser.add_argument(
        "--lora-layers",
        type=int,
        default=8,
        help="LoRA on the top N decoder layers only (0: all); pays for the longer SFT",
    )
    parser.add_argument("--sft-lr", type=float, default=5e-4, help="SFT learning rate (LoRA)")
    parser.add_argument(
        "--round-sft-lr",
        type=float,
        default=0.0,
        help="SFT learning rate of the self-training rounds, which continue from a fitted "
        "adapter (0: --sft-lr)",
    )
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=0,
        help="SFT optimiser steps per round (0: --sft-epochs instead)",
    )
    parser.add_argument("--sft-batch-size", type=int, default=2, help="SFT batch size")
    parser.add_argument(
        "--num-envs",
        type=int,
        default=4,
        help="episodes played at once (their LLM queries are batched)",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="torch threads (0: torch's default, which follows OMP_NUM_THREADS; on a busy CPU "
        "1 is much faster)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of sampling and SFT")
    parser.add_argument(
        "--gateway-timeout-s",
        type=float,
        default=900,
        help="gateway request timeout (a loaded CPU may take minutes per batched query)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("runs/eval-llm-personalize"), help="run directory"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target misses")
    args = parser.parse_args()

    if args.torch_threads:  # on a busy shared CPU, one thread is much faster
        import torch

        torch.set_num_threads(args.torch_threads)
    # a loaded CPU may take minutes per batched planner query: wait rather than time out
    use_patient_config(
        args.out,
        args.model,
        timeout_s=args.gateway_timeout_s,
        torch_threads=args.torch_threads or None,
    )
    # every option names a config field, except those saying how to run the evaluation
    config = {k: v for k, v in vars(args).items() if k not in RUNNER_OPTIONS}
    config["sft_steps"] = args.sft_steps or None  # 0: the recipe's default, --sft-epochs
    config["lora_layers"] = args.lora_layers or None  # 0: every layer
    config["collect_episodes"] = args.collect_episodes or None  # 0: every training episode
    config["replay_bootstrap_examples"] = args.replay_bootstrap_examples or None  # 0: all
    config["round_sft_lr"] = args.round_sft_lr or None  # 0: --sft-lr
    # a finished run with these settings is read back, not run again (its tables reprinted)
    run = run_embedded(
        "llm-personalize", config, out_dir=args.out, progress=True, reuse_completed=True
    )
    results = read_results(args.out)
    if results is None:
        print(f"no results in {args.out}", file=sys.stderr)
        return 1
    print(results.to_markdown())
    checks = verdicts(results.rows, args.rounds)
    ladder = held_out_ladder(results.rows, args.rounds)
    met = target_met(results.rows, args.rounds)
    last = compared_round(args.rounds) or "(no round)"
    print(f"held-out: {last} > bootstrap > zero-shot: {ladder}")
    print(f"issue 16 target (round 2 > bootstrap > zero-shot, held out): {target_line(met)}")
    differences = episode_differences(args.out, run.run_id, config)
    beyond = target_beyond_noise(differences, args.rounds)
    shown = [
        {
            "episodes": row["episodes"],
            "comparison": row["comparison"],
            "n": row["n"],
            "mean": row["mean"],
            "ci95": f"[{row['low']:.2f}, {row['high']:.2f}]",
            "beyond_noise": row["beyond_noise"],
        }
        for row in differences
    ]
    print(table("Paired per-episode differences of success rate (95% bootstrap interval)", shown))
    print(f"both held-out steps of the target beyond noise: {beyond}")
    print(selection_table(args.out))
    print(behaviour_tables(args.out, run.run_id, config))
    summary = {
        "target_met": met,
        "target_beyond_noise": beyond,
        "checks": checks,
        "held_out_ladder": ladder,
        "paired_differences": differences,
    }
    print(json.dumps({**summary, "rows": results.rows}, default=float))
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
