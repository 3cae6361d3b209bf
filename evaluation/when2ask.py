"""When2Ask evaluation: the four MiniGrid tasks, every method, the targets checked.

    .venv/bin/python evaluation/when2ask.py --planner oracle
    .venv/bin/python evaluation/when2ask.py --planner local --episodes 30 --train-steps 4000
    .venv/bin/python evaluation/when2ask.py --noise 0,0.1,0.2,0.3   # the noisy oracle, swept

Runs the `when2ask` recipe in embedded mode and prints its table (the paper's Table 1 beside
the measured figures) and its verdicts: per task, whether the learned mediator's success is
within 2 points of always-ask with at most 20% of its queries, and whether it beats every
fixed rule (always, forced-only, news-or-skill-end) by at least 5 points with no more queries
than news-or-skill-end (the paper's hard-coded rule).

`--noise p1,p2,...` runs one recipe per planner error rate p (the `noisy` planner: the
oracle's plan replaced, with probability p per query, by a plausible wrong one) with the
learned, always, forced-only, news-or-skill-end and random methods, and writes
`noise_sweep.md` (one row per p, task and method) and `noise_sweep.png` (success and queries
per episode against p, one column per task) to the output directory. The figures are
reported as measured; the exit status is 0 whether or not a target holds (use --strict to
fail when the first one does not).

`--max-steps N` caps every episode at N mediator steps, in training and evaluation (default
200, above the tasks' own 100 steps): with a cap near the oracle's 16-20 steps, a wrong plan
followed too long, or a dithering agent, fails the episode instead of only lengthening it.
`--noise-mode persistent` makes the noisy planner answer the same knowledge with the same
plan within an episode (a greedy LLM) instead of drawing every query afresh; `--noise-mode
distractors` draws afresh at a rate that grows with what the agent has seen (min(1, p × the
seen objects other than the one the plan acts on)), so errors depend on the situation.
`--lam`, `--same-plan-penalty` and `--new-plan-bonus` set the mediator's query costs; the
original code's are 0.01, 0.1 and 0.01 (asking for a plan that changes is then free).
A sweep runs as an experiment of `llmrl sweep` (`run_sweep`: a grid over `planner_noise` ×
seeds, its store `<out>/run.sqlite`, its report `<out>/results.md`): the same settings into the
same `--out` skip the completed runs and resume an interrupted one, so adding seeds or p values
costs only the new runs; `--jobs N` runs N of them at once, each in its own process, and
`--merge DIR` adds the seeds another process (or machine) ran into DIR with the same settings.
`--seeds s1 s2 ...` sweeps every seed (training and evaluation
episodes both differ), writes each seed's table to `<out>/seed<s>/`, and writes
`noise_sweep_seeds.md`, `.json` and `.png`: per p, task and method the mean success over seeds
with its 95% bootstrap interval, the learned mediator's gain over the best fixed rule per seed
and its mean, and the target checked on the means.
`--sees-plan` lets the mediator observe the skill in hand (its verb and object type), so it can
learn which plans do not fit the situation; `--counts-objects`, how many objects the agent
knows (what the distractors mode's error rate grows with); `--sees-confidence`, the probability
the planner gave the plan in hand (`--planner local`: the softmax of its skill scores);
`--sees-time`, the share of its step cap used, with the cap a termination in training;
`--sees-knowledge`, what the planner was prompted with and answered (the agent's knowledge and
the skill in hand with its object's colour), so it can learn which plans do not fit it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, get_args

from llmrl.common import stats
from llmrl.common.store import RunStore
from llmrl.learner.algorithms.sb3 import LrSchedule
from llmrl.orchestrator.embedded import run_embedded
from llmrl.orchestrator.experiments import digest, parse_spec
from llmrl.orchestrator.sources import STORE_FILE, experiment_runs
from llmrl.orchestrator.sweep import run_sweep
from llmrl.recipes.base import ConfigError, read_results
from llmrl.recipes.when2ask.asking import FORCED_ONLY, NEWS_OR_SKILL_END
from llmrl.recipes.when2ask.recipe import When2AskConfig

SWEEP_METHODS = ["learned", "always", FORCED_ONLY, NEWS_OR_SKILL_END, "random"]
SWEEP_COLUMNS = ("p", "task", "method", "success_%", "queries/ep", "steps/ep", "return_penalised")
QUERY_COSTS = ("lam", "same_plan_penalty", "new_plan_bonus")  # recipe keys, options alike
FIXED_RULES = ("always", FORCED_ONLY, NEWS_OR_SKILL_END)
TARGET_GAIN = 5.0  # points above every fixed rule
SWEEP_OUT = Path("runs") / "eval-when2ask-noise"  # default --out of a noise sweep
BEATS = "beats the rules on "  # the recipe's per-task verdict note: "...on <task>: met"
Verdict = tuple[float, str]  # (p, the recipe's BEATS note at that p)


def parse_noise(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not 0 <= v <= 1 for v in values):
        raise SystemExit(f"--noise: expected comma-separated numbers in [0, 1], got {text!r}")
    return values


def _int_at_least(text: str, minimum: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type for --max-steps: a step cap of at least 1."""
    return _int_at_least(text, 1, "a positive integer")


def seed_number(text: str) -> int:
    """argparse type for --seed and --seeds: an integer of at least 0."""
    return _int_at_least(text, 0, "an integer >= 0")


def non_negative_float(text: str) -> float:
    """argparse type for the query costs: a number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def run_one(config: dict[str, Any], out: Path) -> Any:
    run_embedded("when2ask", config, out_dir=out, progress=True, reuse_completed=True)
    results = read_results(out)
    if results is None:
        raise SystemExit(f"no results in {out}")
    return results


def sweep_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(SWEEP_COLUMNS) + " |", "|" + "---|" * len(SWEEP_COLUMNS)]
    for row in rows:
        cells = [
            f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in SWEEP_COLUMNS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_sweep(rows: list[dict[str, Any]], path: Path) -> None:
    """Success % (top) and planner queries per episode (bottom) against p, per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(row["task"] for row in rows))
    methods = list(dict.fromkeys(row["method"] for row in rows))
    fig, axes = plt.subplots(2, len(tasks), figsize=(4 * len(tasks), 6.5), squeeze=False)
    for column, task in enumerate(tasks):
        for method in methods:
            points = sorted(
                (row["p"], row["success_%"], row["queries/ep"])
                for row in rows
                if row["task"] == task and row["method"] == method
            )
            if not points:
                continue
            ps, success, queries = zip(*points, strict=True)
            axes[0, column].plot(ps, success, marker="o", label=method)
            axes[1, column].plot(ps, queries, marker="o", label=method)
        axes[0, column].set_title(task)
        axes[0, column].set_ylabel("success %")
        axes[0, column].set_ylim(-2, 102)
        axes[1, column].set_ylabel("planner queries / episode")
        axes[1, column].set_yscale("log")
        axes[1, column].set_xlabel("planner error rate p")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--planner",
        choices=["oracle", "noisy", "local", "llm"],
        default="oracle",
        help="oracle: privileged plans; noisy: the oracle, wrong with probability --noise; "
        "local: the local model scores the feasible skills; llm: a chat model writes plans",
    )
    parser.add_argument("--planner-model", default=None, help="gateway model for local/llm")
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature for local/llm"
    )
    parser.add_argument(
        "--noise",
        default=None,
        help="comma-separated planner error rates p to sweep with the noisy planner, e.g. "
        "0,0.1,0.2,0.3 (implies --planner noisy)",
    )
    parser.add_argument(
        "--noise-mode",
        choices=get_args(When2AskConfig.model_fields["planner_noise_mode"].annotation),
        default="fresh",
        help="noisy planner: fresh (an independent error draw per query), persistent (the "
        "same knowledge gets the same plan within an episode) or distractors (fresh draws at "
        "rate min(1, p x the seen objects other than the plan's))",
    )
    parser.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        help="mediator step cap per episode, training and evaluation (default 200; an "
        "episode not solved by then fails)",
    )
    parser.add_argument("--envs", nargs="+", default=None, help="tasks (default: all four)")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes/method")
    parser.add_argument("--train-steps", type=int, default=20_000, help="PPO steps, asking")
    parser.add_argument(
        "--never-ask-steps", type=int, default=None, help="PPO steps, baseline (sweep: 0)"
    )
    parser.add_argument("--learning-rate", type=float, default=None, help="PPO (default 3e-4)")
    parser.add_argument("--n-steps", type=int, default=None, help="PPO rollout/env (default 128)")
    parser.add_argument(
        "--lr-schedule",
        choices=get_args(LrSchedule),
        default=None,
        help="PPO learning rate over training: constant (default) or linear, annealed to 0 at "
        "the last step",
    )
    parser.add_argument(
        "--ent-coef",
        type=non_negative_float,
        default=None,
        help="PPO entropy bonus (default 0.01; beside a query cost lam of 0.003 it pays for "
        "undecided asking)",
    )
    parser.add_argument(
        "--seed", type=seed_number, default=0, help="seed of training and evaluation"
    )
    parser.add_argument(
        "--seeds",
        type=seed_number,
        nargs="+",
        default=None,
        help="noise sweep: one sweep per seed (into <out>/seed<s>/) and a summary over seeds "
        "(mean, 95%% bootstrap interval); overrides --seed",
    )
    parser.add_argument(
        "--lam",
        type=non_negative_float,
        default=None,
        help="penalty per planner query (default 0.01)",
    )
    parser.add_argument(
        "--same-plan-penalty",
        type=non_negative_float,
        default=None,
        help="extra penalty for asking and getting the same plan back (default 0.01; the "
        "original code: 0.1)",
    )
    parser.add_argument(
        "--new-plan-bonus",
        type=non_negative_float,
        default=None,
        help="reward for asking and getting another plan (default 0; the original code: 0.01)",
    )
    parser.add_argument(
        "--sees-plan",
        action="store_true",
        help="the mediator also observes the skill in hand (verb and object type); default: "
        "only the observation and its plan bookkeeping",
    )
    parser.add_argument(
        "--sees-knowledge",
        action="store_true",
        help="the mediator also observes the planner's input and answer in compact form: the "
        "agent's knowledge (seen objects by colour, door states, what it carries) and the skill "
        "in hand (verb, object type and colour)",
    )
    parser.add_argument(
        "--counts-objects",
        action="store_true",
        help="the mediator also observes how many objects the agent knows (the distractors "
        "mode's error rate grows with it)",
    )
    parser.add_argument(
        "--sees-confidence",
        action="store_true",
        help="the mediator also observes the probability the planner gave the plan in hand "
        "(--planner local: the softmax of its skill scores; other planners count as sure)",
    )
    parser.add_argument(
        "--sees-time",
        action="store_true",
        help="the mediator also observes the share of its step cap used (--max-steps), and "
        "training ends an episode at the cap as a termination, not a truncation",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output dir (default: {SWEEP_OUT} for a noise sweep, else "
        "runs/eval-when2ask-<planner>)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="noise sweep: the experiment's name in <out>/run.sqlite (default: a digest of "
        "its settings but p and seeds, so the same settings with more p values or seeds run "
        "only the new runs)",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="noise sweep: runs (one p and seed each) at once, each in its own process; about "
        "one per CPU core (default 1; the figures are the same either way)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="noise sweep over --seeds: also summarise the completed runs of the same "
        "experiment (same settings and --name) in DIR, seeds run by another process; repeatable",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target misses")
    args = parser.parse_args()
    if args.merge and not args.seeds:
        parser.error("--merge adds seeds to a summary over seeds: give --seeds too")
    if args.jobs > 1 and args.noise is None:
        parser.error("--jobs runs a noise sweep's runs at once: give --noise too")

    config: dict[str, Any] = {
        "planner": args.planner,
        "planner_model": args.planner_model,
        "planner_temperature": args.temperature,
        "eval_episodes": args.episodes,
        "train_steps": args.train_steps,
        "seed": args.seed,
    }
    if args.envs:
        config["envs"] = args.envs
    if args.learning_rate is not None:
        config["learning_rate"] = args.learning_rate
    if args.n_steps is not None:
        config["n_steps"] = args.n_steps
    if args.lr_schedule is not None:
        config["lr_schedule"] = args.lr_schedule
    if args.ent_coef is not None:
        config["ent_coef"] = args.ent_coef
    if args.max_steps is not None:
        config["max_steps"] = args.max_steps
    config.update({k: getattr(args, k) for k in QUERY_COSTS if getattr(args, k) is not None})
    if args.sees_plan:
        config["mediator_sees_plan"] = True
    if args.counts_objects:
        config["mediator_counts_objects"] = True
    if args.sees_knowledge:
        config["mediator_sees_knowledge"] = True
    if args.sees_confidence:
        config["mediator_sees_confidence"] = True
    if args.sees_time:
        config["mediator_sees_time"] = True
    if args.planner == "noisy" or args.noise is not None:
        config["planner_noise_mode"] = args.noise_mode
    if args.noise is not None:
        noise = parse_noise(args.noise)
        if args.seeds:
            return sweep_seeds(args, config, noise)
        sweep_one_seed(args, config, noise)
        return 0
    if args.seeds:
        parser.error("--seeds repeats a noise sweep: give --noise too (or use --seed)")

    config["never_ask_steps"] = 20_000 if args.never_ask_steps is None else args.never_ask_steps
    out = args.out or Path("runs") / f"eval-when2ask-{args.planner}"
    results = run_one(config, out)
    verdicts = [note for note in results.notes if note.startswith("target on ")]
    summary = {
        "planner": args.planner,
        "target_met": all(v.endswith(": met") for v in verdicts) if verdicts else None,
        "rows": results.rows,
    }
    print("\n".join(n for n in results.notes if n.startswith(("target on ", "beats the rules"))))
    print(json.dumps(summary, default=float))
    return 1 if args.strict and not summary["target_met"] else 0


def run_noise_sweep(
    args: argparse.Namespace, config: dict[str, Any], noise: list[float], seeds: list[int]
) -> dict[int, tuple[list[dict[str, Any]], list[Verdict]]]:
    """Every (p, seed) run of the sweep through `run_sweep`; per seed, its rows (one per p,
    task and method) and its per-p "beats the rules" verdicts."""
    out = args.out or SWEEP_OUT
    base = {k: v for k, v in config.items() if k != "seed"}  # seeds are the experiment's
    base.update(planner="noisy", methods=SWEEP_METHODS, never_ask_steps=args.never_ask_steps or 0)
    # Named by its settings alone, not its p values or seeds: the same settings again grow
    # the same experiment (never shrink it), and only the new (p, seed) runs run.
    name = args.name or f"when2ask-noise-{digest(base)[:8]}"
    all_noise, all_seeds = planned_axes(out, name)
    spec = {
        "name": name,
        "recipe": "when2ask",
        "config": base,
        "grid": {"planner_noise": sorted({*all_noise, *noise})},
        "seeds": sorted({*all_seeds, *seeds}),
    }
    try:  # a bad --name, a recipe setting, or --name taken by other settings, named
        run_sweep(parse_spec(spec), out, progress=True, jobs=args.jobs)
    except ConfigError as exc:
        raise SystemExit(f"invalid noise sweep: {exc}") from None
    runs = stored_runs(out, name, noise, seeds)
    missing = [run.run_id for run in runs if run.results is None]
    if missing:
        raise SystemExit(f"runs without results in {out}: {', '.join(missing)}; rerun to resume")
    for other in args.merge:
        have = {(run.seed, run.config["planner_noise"]) for run in runs}
        runs += [
            run
            for run in stored_runs(other, name, noise)
            if run.results is not None and (run.seed, run.config["planner_noise"]) not in have
        ]
    by_seed: dict[int, tuple[list[dict[str, Any]], list[Verdict]]] = {
        int(s): ([], []) for s in sorted({*seeds, *(run.seed for run in runs)})
    }
    for run in sorted(runs, key=lambda r: (r.seed, r.config["planner_noise"])):
        p, (rows, verdicts) = run.config["planner_noise"], by_seed[int(run.seed)]
        rows += [{"p": p, **row} for row in run.results.rows]
        verdicts += [(p, n) for n in run.results.notes if n.startswith(BEATS)]
    return by_seed


def stored_runs(
    out: Path, name: str, noise: list[float], seeds: list[int] | None = None
) -> list[Any]:
    """The runs of experiment `name` in `out` at these p values (and seeds; all if None).
    A directory without a store (a mistyped --merge) holds none, and is not created."""
    if not (out / STORE_FILE).is_file():
        print(f"no run store in {out}: nothing to read there")
        return []
    store = RunStore(out / STORE_FILE)
    try:
        return [
            run
            for run in experiment_runs(store, name)
            if run.config["planner_noise"] in noise and (seeds is None or run.seed in seeds)
        ]
    finally:
        store.close()


def planned_axes(out: Path, name: str) -> tuple[list[float], list[int]]:
    """The p values and seeds the experiment `name` in `out` already plans (none if new)."""
    if not (out / STORE_FILE).exists():
        return [], []
    store = RunStore(out / STORE_FILE)
    try:
        existing = store.get_experiment(name)
    finally:
        store.close()
    if existing is None:
        return [], []
    return existing.spec["grid"]["planner_noise"], existing.spec["seeds"]


def sweep_one_seed(args: argparse.Namespace, config: dict[str, Any], noise: list[float]) -> None:
    """The sweep at `args.seed`: its table, plot and rows in `--out`."""
    out = args.out or SWEEP_OUT
    rows, verdicts = run_noise_sweep(args, config, noise, [args.seed])[args.seed]
    print(write_sweep(out, args, args.seed, rows, verdicts))
    print(f"table, plot and rows in {out}/noise_sweep.{{md,png,json}}")


def sweep_seeds(args: argparse.Namespace, config: dict[str, Any], noise: list[float]) -> int:
    """The sweep at every seed of `--seeds`, each seed's table, then the summary over seeds."""
    out = args.out or SWEEP_OUT
    rows: list[dict[str, Any]] = []
    by_seed = run_noise_sweep(args, config, noise, args.seeds)
    for seed, (seed_rows, verdicts) in by_seed.items():
        write_sweep(out / f"seed{seed}", args, seed, seed_rows, verdicts)
        rows += [{"seed": seed, **row} for row in seed_rows]
    summary = summarise_seeds(rows)
    text = (
        f"# When2Ask, noisy planner sweep over seeds {', '.join(map(str, by_seed))}\n\n"
        f"Per seed: {out}/seed<s>/noise_sweep.md. Success %: mean over seeds [95% bootstrap "
        "interval]; gain: learned minus the best fixed rule (always, forced-only, "
        "news-or-skill-end), per seed, then its mean.\n\n"
        + seeds_table(summary)
        + "\n\n"
        + f"mean gain over every p and task: {overall_gain(summary):+.1f} points\n\n"
        + seeds_verdict(summary)
        + "\n"
    )
    (out / "noise_sweep_seeds.md").write_text(text)
    (out / "noise_sweep_seeds.json").write_text(json.dumps(summary, default=float, indent=1))
    plot_sweep(mean_rows(summary), out / "noise_sweep_seeds.png")
    print(text)
    return 0


def summarise_seeds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (p, task): each method's success and queries over seeds, and the learned
    mediator's gain over the best fixed rule, computed seed by seed."""
    cells = {(r["seed"], r["p"], r["task"], r["method"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    keys = list(dict.fromkeys((r["p"], r["task"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    summary = []
    for p, task in keys:
        # the seeds that ran this p (merged sweeps may have run some p values only)
        here = [s for s in seeds if any((s, p, task, m) in cells for m in methods)]
        entry: dict[str, Any] = {"p": p, "task": task, "seeds": here}
        for method in methods:
            found = [cells[(s, p, task, method)] for s in here if (s, p, task, method) in cells]
            entry[method] = {
                "success_%": stats.estimate(r["success_%"] for r in found).to_dict(),
                "queries/ep": stats.mean(r["queries/ep"] for r in found),
            }
        gains = []
        for seed in here:
            fixed = [cells.get((seed, p, task, m)) for m in FIXED_RULES]
            learned = cells.get((seed, p, task, "learned"))
            if learned is not None and all(fixed):
                gains.append(learned["success_%"] - max(r["success_%"] for r in fixed))
        entry["gain"] = {"per_seed": gains, **stats.estimate(gains).to_dict()}
        summary.append(entry)
    return summary


def method_cells(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A summary entry's per-method cells (every dict-valued key but the gain)."""
    return {k: v for k, v in entry.items() if isinstance(v, dict) and k != "gain"}


def mean_rows(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summary as one row per p, task and method (means over seeds), for `plot_sweep`."""
    return [
        {
            "p": entry["p"],
            "task": entry["task"],
            "method": method,
            "success_%": cell["success_%"]["mean"],
            "queries/ep": cell["queries/ep"],
        }
        for entry in summary
        for method, cell in method_cells(entry).items()
    ]


def seeds_table(summary: list[dict[str, Any]]) -> str:
    methods = list(method_cells(summary[0]))
    header = ["p", "task", *methods, "gain per seed", "mean gain"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in summary:
        cells = [f"{entry['p']:g}", entry["task"]]
        for method in methods:
            success = stats.Estimate(**entry[method]["success_%"]).format(3)
            cells.append(f"{success} / {entry[method]['queries/ep']:.2f}")
        cells.append(", ".join(f"{g:+.1f}" for g in entry["gain"]["per_seed"]))
        cells.append(f"{entry['gain']['mean']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def overall_gain(summary: list[dict[str, Any]]) -> float:
    """The learned mediator's gain over the best fixed rule, averaged over every p, task and
    seed (one number to compare settings by)."""
    return stats.mean(gain for entry in summary for gain in entry["gain"]["per_seed"])


def seeds_verdict(summary: list[dict[str, Any]]) -> str:
    """The target on the means: at some p > 0, on at least two tasks, the mean gain is
    >= 5 points at no more mean queries than news-or-skill-end."""
    met: dict[float, list[str]] = {}
    for entry in summary:
        learned, news = entry.get("learned"), entry.get(NEWS_OR_SKILL_END)
        if entry["p"] <= 0 or learned is None or news is None or not entry["gain"]["n"]:
            continue
        cheap = learned["queries/ep"] <= news["queries/ep"]
        if entry["gain"]["mean"] >= TARGET_GAIN and cheap:
            met.setdefault(entry["p"], []).append(entry["task"])
    best = max(met.items(), key=lambda item: len(item[1]), default=(None, []))
    verdict = "met" if len(best[1]) >= 2 else "NOT met"
    where = f" (p={best[0]:g}: {', '.join(best[1])})" if best[1] else ""
    return (
        "target on the means over seeds (learned >= 5 points above every fixed rule at some "
        f"p > 0 on at least two tasks, at no more queries than news-or-skill-end): {verdict}"
        + where
    )


def write_sweep(
    out: Path,
    args: argparse.Namespace,
    seed: int,
    rows: list[dict[str, Any]],
    verdicts: list[Verdict],
) -> str:
    """One seed's noise_sweep.md, .png and .json in `out`; returns the markdown."""
    out.mkdir(parents=True, exist_ok=True)
    beaten = {  # tasks where the learned mediator beats the rules at some p > 0
        note.removeprefix(BEATS).split(":")[0]
        for p, note in verdicts
        if p > 0 and note.endswith(": met")
    }
    verdict = "met" if len(beaten) >= 2 else "NOT met"
    ppo = f"PPO {args.train_steps} steps"
    if args.learning_rate is not None or args.n_steps is not None:
        ppo += f" (learning rate {args.learning_rate}, rollout {args.n_steps} steps per env)"
    if args.lr_schedule == "linear":
        ppo += ", learning rate annealed linearly to 0"
    if args.ent_coef is not None:
        ppo += f", entropy bonus {args.ent_coef:g}"
    settings = ", ".join(
        [f"step cap {args.max_steps or 200}"]
        + [f"{k} {getattr(args, k)}" for k in QUERY_COSTS if getattr(args, k) is not None]
        + (["the mediator sees the skill in hand"] if args.sees_plan else [])
        + (["the mediator counts the objects it knows"] if args.counts_objects else [])
        + (["the mediator reads the agent's knowledge and the plan"] if args.sees_knowledge else [])
        + (["the mediator sees the planner's confidence"] if args.sees_confidence else [])
        + (["the mediator sees its clock"] if args.sees_time else [])
    )
    text = (
        f"# When2Ask, noisy planner sweep\n\n{args.episodes} evaluation episodes per method, "
        f"{ppo}, seed {seed}, {args.noise_mode} errors, {settings}.\n\n{sweep_table(rows)}\n\n"
        + "\n".join(f"- p={p:g}: {note}" for p, note in verdicts)
        + "\n\ntarget (learned beats every fixed rule at some p > 0 on at least two tasks): "
        f"{verdict} (tasks: {', '.join(sorted(beaten)) or 'none'})\n"
    )
    (out / "noise_sweep.md").write_text(text)
    plot_sweep(rows, out / "noise_sweep.png")
    (out / "noise_sweep.json").write_text(json.dumps(rows, default=float, indent=1))
    return text


if __name__ == "__main__":
    sys.exit(main())
