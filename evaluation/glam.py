"""GLAM evaluation: SmolLM2-135M LoRA-PPO on BabyAI-Text against its baselines, over seeds.

    # the issue's target budget (~2 h per seed on a quiet 2-core CPU, by estimate)
    .venv/bin/python evaluation/glam.py --train-steps 5120 --num-envs 16 --rollout-steps 40 \
        --eval-episodes 50 --eval-every 2 --seeds 0 1 2
    # the README's LoRA runs (a quarter of the budget: ~20 min of training on one core)
    .venv/bin/python evaluation/glam.py --methods zero-shot glam --train-steps 1280 \
        --num-envs 8 --rollout-steps 40 --update-epochs 2 --minibatch-size 64 \
        --learning-rate 1e-3 --lora-layers 2 --eval-every 4 --eval-episodes 50 --seeds 0
    .venv/bin/python evaluation/glam.py --methods bc --train-steps 5120 --num-envs 8 \
        --lora-layers 2 --bc-steps 200 --bc-batch-size 8 --eval-episodes 50 --seeds 0 \
        --name eval-glam-bc --out runs/eval-glam-bc

Runs the `glam` recipe once per seed as an experiment (`llmrl.orchestrator.sweep`: resumable,
every run in `--out`), then writes one table over the seeds (`glam_table.md` in `--out`,
printed too): per method x test the mean success with its 95% bootstrap interval
(`llmrl.common.stats`; one seed: the value), its change relative to the training vocabulary,
mean return and length, the env steps each method learned from, and the paper's figure
(`llmrl.recipes.glam.paper`, second-hand). The issue's target is checked and printed as
measured: GLAM's held-out success at least 20 points above the zero-shot model's. The exit
status is 0 whether or not it holds (--strict: 1 when it does not). Seeds trained by separate
processes (one `--out` each) are reported as one table with `--report-only --seeds ... --merge
DIR:EXPERIMENT`, which reads the stored runs and trains nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, get_args

from llmrl.common.stats import estimate
from llmrl.common.store import RunStore
from llmrl.llm_gateway.settings import use_patient_config
from llmrl.orchestrator.experiments import parse_spec, plan_experiment
from llmrl.orchestrator.sources import STORE_FILE, experiment_runs
from llmrl.orchestrator.sweep import run_sweep
from llmrl.recipes.base import ConfigError, Results
from llmrl.recipes.glam.config import METHODS, NPAE_MICROBATCH, GlamConfig
from llmrl.recipes.glam.paper import NOTES as PAPER_NOTES
from llmrl.recipes.glam.paper import paper_success
from llmrl.recipes.glam.training import PpoSettings

TARGET_POINTS = 0.20  # GLAM's success above the zero-shot model's, on held-out seeds
# not part of the recipe's config
RUNNER_OPTIONS = (
    "seeds",
    "out",
    "strict",
    "name",
    "torch_threads",
    "gateway_timeout_s",
    "merge",
    "report_only",
)


def seed_results(out: Path, experiment: str) -> dict[int, Any]:
    """Each completed run's results table, by its seed (none where `out` holds no store: a
    mistyped --out or --merge directory is reported empty, not created)."""
    if not (out / STORE_FILE).is_file():
        return {}
    store = RunStore(out / STORE_FILE)
    try:
        runs = experiment_runs(store, experiment)
    finally:
        store.close()
    return {int(run.seed): run.results for run in runs if run.results is not None}


def merged_results(tables: list[dict[int, Any]]) -> dict[int, Results]:
    """Per seed, the rows of several sweeps' tables in one (the first sweep's row wins a
    (method, test) both hold): methods trained by separate processes, reported together."""
    merged: dict[int, Results] = {}
    for found in tables:
        for seed, table in found.items():
            into = merged.setdefault(seed, Results(table.title, [], notes=list(table.notes)))
            have = {(r["method"], r["test"]) for r in into.rows}
            into.rows += [r for r in table.rows if (r["method"], r["test"]) not in have]
    return merged


def parse_merge(value: str) -> tuple[Path, str]:
    """`DIR:NAME` of --merge; an argparse error saying the form otherwise."""
    out, sep, name = value.rpartition(":")
    if not sep or not out or not name:
        raise argparse.ArgumentTypeError(f"--merge wants DIR:EXPERIMENT, got {value!r}")
    return Path(out), name


def table_over_seeds(tables: list[Any]) -> list[dict[str, Any]]:
    """One row per (method, test) present in every seed's table: estimates over seeds."""
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for table in tables:
        for row in table.rows:
            by_key.setdefault((row["method"], row["test"]), []).append(row)
    rows = []
    for (method, test), seed_rows in by_key.items():
        if seed_rows[0]["success_rate"] is None:  # a method that was not run (DRRN)
            paper = paper_success(method, test)
            rows.append(
                {"method": method, "test": test, "success": "not run", "seeds": 0, "paper": paper}
            )
            continue
        success = estimate(r["success_rate"] for r in seed_rows)
        rows.append(
            {
                "method": method,
                "test": test,
                "success": success.format(3),
                "success_mean": success.mean,
                "change": estimate(r["success_change"] for r in seed_rows).format(3),
                "return": estimate(r["mean_return"] for r in seed_rows).format(3),
                "length": estimate(r["mean_length"] for r in seed_rows).format(3),
                "env_steps": int(max(r["env_steps"] or 0 for r in seed_rows)),
                "seeds": success.n,
                "paper": paper_success(method, test),
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], notes: list[str]) -> str:
    columns = ["method", "test", "success", "change", "return", "length", "env_steps", "seeds"]
    columns.append("paper")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines + [""] + [f"- {note}" for note in notes]) + "\n"


def target_check(rows: list[dict[str, Any]]) -> tuple[bool | None, str]:
    means = {r["method"]: r.get("success_mean") for r in rows if r["test"] == "train"}
    glam, zero = means.get("glam"), means.get("zero-shot")
    if glam is None or zero is None:
        return None, "target: not checked (needs glam and zero-shot)"
    met = glam - zero >= TARGET_POINTS
    verdict = "met" if met else "missed"
    return met, (
        f"target (glam >= zero-shot + {TARGET_POINTS:.0%} on held-out seeds): {verdict} "
        f"(glam {glam:.3f}, zero-shot {zero:.3f}, {glam - zero:+.3f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="BabyAIText-GoToLocalS5N2", help="text env to train on")
    parser.add_argument("--model", default="smollm2", help="gateway model (hf backend)")
    parser.add_argument(
        "--methods", nargs="+", default=list(METHODS), choices=METHODS, help="default: all"
    )
    parser.add_argument("--variants", nargs="*", default=[], help="generalisation tests")
    parser.add_argument("--train-steps", type=int, default=640, help="env-step budget")
    parser.add_argument("--num-envs", type=int, default=8, help="envs per PPO rollout")
    parser.add_argument("--rollout-steps", type=int, default=16, help="steps per env/rollout")
    parser.add_argument("--update-epochs", type=int, default=2, help="PPO epochs per update")
    parser.add_argument("--minibatch-size", type=int, default=32, help="PPO minibatch")
    parser.add_argument(
        "--microbatch-size",
        type=int,
        default=None,
        help="samples per forward/backward of the PPO update, gradients accumulated (default: "
        f"GLAM the whole minibatch, NPAE {NPAE_MICROBATCH}, which its full fine-tuning needs "
        "to fit in memory)",
    )
    parser.add_argument(
        "--learning-rate", type=float, default=1e-4, help="GLAM's learning rate (LoRA or full)"
    )
    parser.add_argument(
        "--finetune",
        choices=get_args(GlamConfig.model_fields["finetune"].annotation),
        default="lora",
        help="GLAM trains a LoRA (served through the gateway) or every weight (full; "
        f"microbatch {NPAE_MICROBATCH} unless set, played from its checkpoint like NPAE)",
    )
    parser.add_argument(
        "--lora-layers",
        type=int,
        default=GlamConfig.model_fields["lora_layers"].default,
        help="adapt the top N decoder layers (SmolLM2-135M has 30; all of them want "
        "--microbatch-size 8 or so to fit 24 GB)",
    )
    parser.add_argument(
        "--lora-rank",
        type=int,
        default=GlamConfig.model_fields["lora_rank"].default,
        help="LoRA rank of GLAM and BC (alpha = 2 x rank)",
    )
    for name, field in PpoSettings.model_fields.items():  # GLAM's and NPAE's PPO
        option = f"--{name.replace('_', '-')}"
        if field.annotation is bool:
            parser.add_argument(option, action="store_true", help=field.description)
        else:
            help_text = f"{field.description} Default: {field.default}."
            kind = str if field.annotation is str else float
            parser.add_argument(option, type=kind, default=field.default, help=help_text)
    parser.add_argument(
        "--drrn-learning-rate", type=float, default=1e-4, help="DRRN's Adam learning rate"
    )
    parser.add_argument(
        "--reduction",
        choices=["sum", "mean"],
        default="mean",
        help="phrase score: sum (GLAM's) or per-token mean of its token log-probs",
    )
    parser.add_argument(
        "--greedy",
        action="store_true",
        help="evaluate every method by its most likely action (default: sample from the "
        "policy, as the original's tests do)",
    )
    parser.add_argument("--eval-every", type=int, default=2, help="updates between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=20, help="held-out episodes")
    parser.add_argument("--bc-steps", type=int, default=100, help="SFT steps of BC")
    parser.add_argument("--bc-batch-size", type=int, default=8, help="examples per SFT step")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one run per seed")
    parser.add_argument("--name", default="eval-glam", help="experiment name")
    parser.add_argument("--out", type=Path, default=Path("runs/eval-glam"), help="sweep dir")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target misses")
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch threads (0: torch's default)"
    )
    parser.add_argument(
        "--gateway-timeout-s", type=float, default=900, help="gateway request timeout"
    )
    parser.add_argument(
        "--merge",
        type=parse_merge,
        action="append",
        default=[],
        metavar="DIR:EXPERIMENT",
        help="also report another sweep's runs (e.g. baselines run by a second process), "
        "seed by seed; repeatable",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: report the --seeds runs already stored in --out and the --merge "
        "sweeps (seeds trained by separate processes, one table over them)",
    )
    args = parser.parse_args()

    if args.torch_threads:  # on a busy shared CPU, one thread is much faster
        import torch

        torch.set_num_threads(args.torch_threads)
    config = {k: v for k, v in vars(args).items() if k not in RUNNER_OPTIONS}
    try:  # a bad --name or --seeds, or a recipe setting, named by its key, before any file
        spec = parse_spec(
            {"name": args.name, "recipe": "glam", "config": config, "seeds": args.seeds}
        )
        plan_experiment(spec, args.name)  # every run's recipe config checked
        if args.report_only:
            return report(args)
        # fp32: the learner's copy of the model is fp32 too, so both score alike
        use_patient_config(
            args.out,
            args.model,
            args.gateway_timeout_s,
            dtype="float32",
            torch_threads=args.torch_threads or None,
        )
        run_sweep(spec, args.out, progress=True)
    except ConfigError as exc:
        raise SystemExit(f"invalid GLAM sweep: {exc}") from None
    return report(args)


def report(args: argparse.Namespace) -> int:
    """The table over the --seeds runs stored in --out and the --merge sweeps."""
    found = merged_results(
        [seed_results(args.out, args.name)] + [seed_results(d, n) for d, n in args.merge]
    )
    tables = [found[s] for s in args.seeds if s in found]
    if not tables:
        print(
            f"no results for seeds {args.seeds} in {args.out} (experiment {args.name}) or the "
            "--merge sweeps: run them first (without --report-only)",
            file=sys.stderr,
        )
        return 1
    rows = table_over_seeds(tables)
    met, verdict = target_check(rows)
    budget = (
        f"{args.env}, {args.model}, {args.train_steps} env steps ({args.num_envs} envs x "
        f"{args.rollout_steps} steps per update), {args.eval_episodes} held-out episodes, "
        f"{'greedy' if args.greedy else 'sampled'} actions, "
        f"seeds {[s for s in args.seeds if s in found]}; success: mean [95% bootstrap interval]"
    )
    notes = [budget, verdict, *tables[0].notes[1:]]
    notes = [n for n in notes if n not in PAPER_NOTES] + list(PAPER_NOTES)
    text = markdown(rows, notes)
    (args.out / "glam_table.md").write_text(text)
    print(text)
    print(json.dumps({"target_met": met, "rows": rows}, default=float))
    return 1 if args.strict and met is False else 0


if __name__ == "__main__":
    sys.exit(main())
