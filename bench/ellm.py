"""ELLM's training loop speed: env-steps/s (frames/s) of dqn-ellm pretraining on CrafterText
with and without the LLM and the reward model, the share of the time spent in each part, and
the suggester's caption cache hit rate after warm-up (the first 10% of the frames).

Three configurations of the same loop (same envs, same DQN, same frames):
* `none`: no intrinsic reward: the env and the DQN only;
* `oracle`: the reward model only (SuggestionReward's embeddings, all-MiniLM-L6-v2, through the
  gateway), suggestions from the scripted oracle;
* `ellm`: the LLM too (SmolLM2-135M ranks ELLM's goal list for each new caption, `llm-score`,
  or writes goals, `--suggester llm`), then the reward model.

Each runs in a fresh LLMRL_HOME with an empty gateway cache (in-process gateway: embedded mode).

    python bench/ellm.py [--frames 4000] [--num-envs 8] [--suggester llm-score] [--model smollm2]

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml


def run_one(method: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import llmrl.llm_gateway.client as gateway_client
    from llmrl.recipes.ellm.training import EllmTrainingJob, train_ellm

    home = root / method
    home.mkdir(parents=True)
    os.environ["LLMRL_HOME"] = str(home)
    config = home / "gateway.yaml"
    cache = {"backend": "sqlite", "sqlite_path": str(home / "cache.sqlite")}
    settings = {
        "cache": cache,
        "torch_threads": args.torch_threads,
        # a loaded machine answers slowly: wait for the local model rather than fail
        "models": {args.model: {"timeout_s": 900}},
    }
    config.write_text(yaml.safe_dump(settings))
    os.environ["LLMRL_LLM_GATEWAY_CONFIG"] = str(config)
    gateway_client._shared_gateway = None  # a fresh gateway (and cache) per configuration
    job = EllmTrainingJob(
        env=args.env,
        num_envs=args.num_envs,
        method=method,
        suggester=args.suggester,
        model=args.model,
        frames=args.frames,
        seed=args.seed,
        dqn={
            "learning_starts": min(1_000, args.frames // 2),
            "buffer_size": 20_000,
            "checkpoint_every": 10 * args.frames,  # only the final checkpoint
        },
        model_path=str(home / "line"),
    )
    if method != "none":  # load the models before the clock starts
        llm = gateway_client.connect()
        llm.embed(["warm up"])
        if method == "ellm":
            llm.score("warm up", [" a", " b"], model=args.model)
    import torch

    torch.set_num_threads(args.torch_threads)  # this process's (a job never sets threads)
    started = time.perf_counter()
    result = train_ellm(job)
    seconds = time.perf_counter() - started
    timings = result["timings"]
    parts = {
        "env": timings.get("env", 0.0),
        "llm_suggestions": timings.get("suggest", 0.0),
        "reward_model": timings.get("reward", 0.0) + timings.get("embed", 0.0),
    }
    parts["agent_and_rest"] = max(seconds - sum(parts.values()), 0.0)
    counters, late = result["counters"], result["counters_after_warm_up"]

    def hit_rate(c: dict[str, float]) -> float | None:
        calls, hits = c.get("calls", 0.0), c.get("cache_hits", 0) + c.get("gateway_cache_hits", 0)
        if not calls or hits + c.get("asked", 0) == 0:  # no LLM behind the suggester
            return None
        return hits / calls

    return {
        "frames": result["frames"],
        "seconds": round(seconds, 2),
        "env_steps_per_s": round(result["frames"] / seconds, 1),
        "share": {k: round(v / seconds, 3) for k, v in parts.items()},
        "suggester_calls": counters.get("calls", 0),
        "llm_queries": counters.get("asked", 0),
        "caption_cache_hit_rate": hit_rate(counters),
        "caption_cache_hit_rate_after_warm_up": hit_rate(late),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CrafterText", help="CrafterText-like env id")
    parser.add_argument("--frames", type=int, default=4_000, help="frames per configuration")
    parser.add_argument("--num-envs", type=int, default=8, help="envs stepped together")
    parser.add_argument(
        "--suggester",
        default="llm-score",
        choices=("llm", "llm-score"),
        help="llm: the LLM writes suggestions; llm-score: it scores the candidate goals",
    )
    parser.add_argument("--model", default="smollm2", help="gateway model of the suggester")
    parser.add_argument("--methods", default="none,oracle,ellm", help="configurations to run")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="seed of the envs and the agent")
    args = parser.parse_args()
    import torch  # imported (with the optimizer's own imports) before any clock starts

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    figures: dict[str, Any] = {
        "env": args.env,
        "frames": args.frames,
        "num_envs": args.num_envs,
        "suggester": args.suggester,
        "model": args.model,
    }
    with tempfile.TemporaryDirectory(prefix="bench-ellm-") as root:
        for method in args.methods.split(","):
            figures[method] = run_one(method, args, Path(root))
            print(method, json.dumps(figures[method]), file=sys.stderr, flush=True)
    if "none" in figures and "ellm" in figures:
        figures["ellm_speed_ratio_to_none"] = round(
            figures["ellm"]["env_steps_per_s"] / figures["none"]["env_steps_per_s"], 3
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
