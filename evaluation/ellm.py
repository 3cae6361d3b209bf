"""ELLM's result target (issue 13) on CrafterText: pretraining without task reward, per method.

At a frame budget per method, ELLM with the local model (SmolLM2-135M, score mode by default)
and ELLM-oracle should each unlock more distinct achievements per episode (mean over the
episodes ending in the last 10% of pretraining, over `--seeds` seeds) than the DQN without
intrinsic reward; the Crafter score is reported for every method; the suggester's caption
cache hit rate should be >= 90% after the first 10% of the frames.

Each seed is one embedded run of the recipe `ellm` (resumable: run the script again with the
same `--out` and it continues). Seed 0 runs every method in `--methods` (and fine-tuning when
`--finetune-frames` > 0); the other seeds run the target methods only (ellm, oracle, none).

    python evaluation/ellm.py --frames 150000 --seeds 3           # the full budget
    python evaluation/ellm.py --frames 3000 --seeds 1 --eval-episodes 4 --out runs/ellm-small

Writes `<out>/report.md`, `<out>/report.json` and `<out>/achievements.png`; the last line
printed is one JSON object with the figures and the verdicts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

TARGET_METHODS = ("ellm", "oracle", "none")
# Du et al. 2023 (ELLM), Crafter, as far as we can cite them: the paper plots achievements per
# episode over 5M pretraining frames; we do not transcribe numbers we cannot check.
PAPER = {
    "frames": 5_000_000,
    "note": "Du et al. 2023, Crafter pretraining (Fig. 3): ELLM and the oracle above APT, RND "
    "and no intrinsic reward; numbers not transcribed here",
}


def seed_config(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    methods = args.methods if seed == 0 else [m for m in args.methods if m in TARGET_METHODS]
    finetune = args.finetune_frames if seed == 0 else 0
    return {
        "env": args.env,
        "env_kwargs": {"length": args.episode_length} if args.episode_length else {},
        "methods": methods,
        "suggester": args.suggester,
        "model": args.model,
        "pretrain_frames": args.frames,
        "num_envs": args.num_envs,
        "eval_episodes": args.eval_episodes,
        "finetune_frames": finetune,
        "finetune_from": ["ellm"] if finetune and "ellm" in methods else [],
        "learning_starts": min(5_000, args.frames // 10),
        "exploration_fraction": 0.5,
        "buffer_size": min(100_000, args.frames),
        "checkpoint_every": max(1_000, args.frames // 10),
        "seed": seed,
    }


def plot_curves(runs: dict[int, Path], frames: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmrl.recipes.ellm.report import binned
    from llmrl.recipes.ellm.training import read_episodes

    by_method: dict[str, list[tuple[list[float], list[float]]]] = {}
    for out in runs.values():
        for line in sorted((out / "checkpoints" / "pretrain").glob("*")):
            by_method.setdefault(line.name, []).append(
                binned(read_episodes(line), "unlocked", frames, bins=10)
            )
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, curves in by_method.items():
        grid = sorted({x for xs, _ in curves for x in xs})
        means = [np.mean([ys[xs.index(x)] for xs, ys in curves if x in xs]) for x in grid]
        ax.plot(grid, means, marker=".", label=f"{method} ({len(curves)} seeds)")
    ax.set_xlabel("pretraining frames")
    ax.set_ylabel("achievements unlocked per episode")
    ax.set_title("CrafterText pretraining (no task reward)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CrafterText", help="text env to pretrain in")
    parser.add_argument("--frames", type=int, default=150_000, help="pretraining frames/method")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the target methods")
    parser.add_argument(
        "--methods",
        default="ellm,oracle,none,all-goals,rnd,knn",
        help="methods of seed 0 (other seeds: ellm, oracle, none)",
    )
    parser.add_argument(
        "--suggester",
        default="llm-score",
        choices=("llm", "llm-score"),
        help="llm: the LLM writes suggestions; llm-score: it scores the candidate goals",
    )
    parser.add_argument("--model", default="smollm2", help="gateway model of the suggester")
    parser.add_argument("--num-envs", type=int, default=8, help="envs stepped together")
    parser.add_argument(
        "--eval-episodes", type=int, default=10, help="evaluation episodes per method and seed"
    )
    parser.add_argument("--episode-length", type=int, default=0, help="0: crafter's 10000")
    parser.add_argument(
        "--finetune-frames", type=int, default=0, help="fine-tuning frames, seed 0 (0: none)"
    )
    parser.add_argument("--out", default="runs/ellm-eval", help="output folder")
    args = parser.parse_args()
    args.methods = args.methods.split(",")
    out = Path(args.out)

    from llmrl.llm_gateway.settings import use_patient_config
    from llmrl.orchestrator.embedded import run_embedded

    # the local model may answer slowly on a loaded machine: wait rather than fail
    use_patient_config(out, args.model, timeout_s=900)

    runs: dict[int, Path] = {}
    for seed in range(args.seeds):
        runs[seed] = out / f"seed{seed}"
        print(f"seed {seed}: {runs[seed]}", file=sys.stderr, flush=True)
        run_embedded("ellm", seed_config(args, seed), out_dir=runs[seed], progress=False)

    rows: dict[str, list[dict[str, Any]]] = {}
    for out_dir in runs.values():
        for row in json.loads((out_dir / "results.json").read_text())["rows"]:
            if row["frames"]:  # the pretrained methods (not the from-scratch fine-tuning row)
                rows.setdefault(row["method"], []).append(row)

    def mean(method: str, key: str) -> float:
        values = [r[key] for r in rows.get(method, []) if r.get(key) is not None]
        values = [v for v in values if not (isinstance(v, float) and np.isnan(v))]
        return float(np.mean(values)) if values else float("nan")

    table = []
    for method, method_rows in rows.items():
        table.append(
            {
                "method": method,
                "seeds": len(method_rows),
                "achievements_last10": mean(method, "achievements_last10"),
                "eval_achievements": mean(method, "eval_achievements"),
                "crafter_score": mean(method, "crafter_score"),
                "caption_cache_hit_rate_after_10pct": mean(
                    method, "caption_cache_hit_rate_after_10pct"
                ),
                "llm_requests": mean(method, "llm_requests"),
                "cost_usd": mean(method, "cost_usd"),
            }
        )
    by = {row["method"]: row for row in table}
    none = by.get("none", {}).get("achievements_last10", float("nan"))
    verdicts = {
        f"{m}_beats_none": bool(by[m]["achievements_last10"] > none)
        for m in ("ellm", "oracle")
        if m in by
    }
    if "ellm" in by:
        verdicts["cache_hit_rate_ge_90pct_after_10pct"] = bool(
            by["ellm"]["caption_cache_hit_rate_after_10pct"] >= 0.9
        )
    plot_curves(runs, args.frames, out / "achievements.png")
    lines = [
        f"# ELLM on {args.env}: {args.frames} pretraining frames per method and seed",
        "",
        "| method | seeds | achievements/episode (last 10%) | eval achievements/episode "
        "| Crafter score | caption cache hits after 10% | LLM requests | cost USD |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table:
        lines.append(
            f"| {row['method']} | {row['seeds']} | {row['achievements_last10']:.2f} | "
            f"{row['eval_achievements']:.2f} | {row['crafter_score']:.2f} | "
            f"{row['caption_cache_hit_rate_after_10pct']:.3f} | {row['llm_requests']:.0f} | "
            f"{row['cost_usd']:.4f} |"
        )
    lines += ["", f"verdicts: {verdicts}", f"paper: {PAPER['note']} ({PAPER['frames']} frames)"]
    lines.append("![achievements](achievements.png)")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    figures = {"frames": args.frames, "seeds": args.seeds, "table": table, "verdicts": verdicts}
    (out / "report.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
