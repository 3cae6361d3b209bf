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

    python bench/ellm.py [--pretrain-frames 4000] [--num-envs 8] [--suggester llm-score]
                         [--model smollm2] [--methods none oracle ellm]

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

from llmrl.recipes.ellm.config import EllmConfig
from llmrl.recipes.options import add_model_options, parse_model_options

BENCH_METHODS = ["none", "oracle", "ellm"]  # the loop alone, + the reward model, + the LLM


def run_one(method: str, config: EllmConfig, threads: int, root: Path) -> dict[str, Any]:
    import llmrl.llm_gateway.client as gateway_client
    from llmrl.recipes.ellm.training import EllmTrainingJob, train_ellm

    home = root / method
    home.mkdir(parents=True)
    os.environ["LLMRL_HOME"] = str(home)
    gateway_file = home / "gateway.yaml"
    cache = {"backend": "sqlite", "sqlite_path": str(home / "cache.sqlite")}
    settings = {
        "cache": cache,
        "torch_threads": threads,
        # a loaded machine answers slowly: wait for the local model rather than fail
        "models": {config.model: {"timeout_s": 900}},
    }
    gateway_file.write_text(yaml.safe_dump(settings))
    os.environ["LLMRL_LLM_GATEWAY_CONFIG"] = str(gateway_file)
    gateway_client._shared_gateway = None  # a fresh gateway (and cache) per configuration
    job = EllmTrainingJob(
        env=config.env,
        num_envs=config.num_envs,
        method=method,
        suggester=config.suggester,
        model=config.model,
        frames=config.pretrain_frames,
        seed=config.seed,
        dqn={
            "learning_starts": min(1_000, config.pretrain_frames // 2),
            "buffer_size": 20_000,
            "checkpoint_every": 10 * config.pretrain_frames,  # only the final checkpoint
        },
        model_path=str(home / "line"),
    )
    if method != "none":  # load the models before the clock starts
        llm = gateway_client.connect()
        llm.embed(["warm up"])
        if method == "ellm":
            llm.score("warm up", [" a", " b"], model=config.model)
    import torch

    torch.set_num_threads(threads)  # this process's (a job never sets threads)
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
    # the recipe's settings, from its config model (the bench's own defaults where noted)
    add_model_options(
        parser,
        EllmConfig,
        ["env", "pretrain_frames", "num_envs", "suggester", "model", "methods", "seed"],
        defaults={"pretrain_frames": 4_000, "methods": BENCH_METHODS},
    )
    parser.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads")
    # pretraining only: no fine-tuning starts to check
    args, config = parse_model_options(parser, EllmConfig, None, finetune_from=[])
    import torch  # imported (with the optimizer's own imports) before any clock starts

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    figures: dict[str, Any] = {
        "env": config.env,
        "frames": config.pretrain_frames,
        "num_envs": config.num_envs,
        "suggester": config.suggester,
        "model": config.model,
    }
    with tempfile.TemporaryDirectory(prefix="bench-ellm-") as root:
        for method in config.methods:
            figures[method] = run_one(method, config, args.torch_threads, Path(root))
            print(method, json.dumps(figures[method]), file=sys.stderr, flush=True)
    if "none" in figures and "ellm" in figures:
        figures["ellm_speed_ratio_to_none"] = round(
            figures["ellm"]["env_steps_per_s"] / figures["none"]["env_steps_per_s"], 3
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
