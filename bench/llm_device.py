"""GLAM's two LLM workloads on each device: the rollout's scoring and the PPO update.

On SmolLM2-135M's architecture (random weights: the same arithmetic as the pretrained ones,
so no weights need to be on the machine), LoRA on the top `--lora-layers` layers as GLAM
trains it, per device:
  * `rollout`: one batched, KV-shared scoring of `--num-envs` GLAM prompts (~160 tokens) and the
    six action phrases, keeping the frozen layers' states (no gradients);
  * `update`: one PPO-sized forward + backward of `--minibatch-size` of those samples through the
    top layers, from the kept states, and an Adam step.
Each is the median of `--repeats` timed runs after one warm-up. The CPU runs fp32 (bf16 only
where native there), a GPU bf16 autocast where it computes bf16. The ratios are the CPU's
seconds over each other device's, measured in this one run. The last line printed is one
JSON object with every figure.

    python bench/llm_device.py                    # the CPU, and the GPU where torch sees one
    python bench/llm_device.py --devices cpu      # the CPU alone
    python bench/llm_device.py --architecture tiny --lora-layers 1   # a quick check
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from llmrl.recipes.glam.config import GlamConfig
from llmrl.recipes.options import add_model_options, parse_model_options

PHRASES = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
VIEW = "You see a wall 3 steps forward, You see a red ball 1 step left and 2 steps forward"


def glam_prompts(policy: Any, count: int) -> list[list[int]]:
    """`count` GLAM prompts with three observations and two actions (~160 tokens each)."""
    from llmrl.recipes.glam.prompt import PromptHistory

    prompts = []
    for i in range(count):
        history = PromptHistory(PHRASES)
        history.start(f"go to the red ball number {i}", VIEW)
        history.advance(PHRASES[i % 3], VIEW)
        history.advance(PHRASES[(i + 1) % 3], VIEW)
        prompts.append(policy.encode(history.prompt()))
    return prompts


def timed(run: Any, repeats: int, sync: Any) -> float:
    """Median seconds of `run()` over `repeats` runs after one warm-up."""
    run()
    sync()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(model_dir: str, device: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from llmrl.learner.llm.model import LlmPolicyModel
    from llmrl.learner.llm.scorer import score_candidates, score_from_frozen

    torch.manual_seed(0)
    policy = LlmPolicyModel.load(
        model_dir, lora=True, lora_layers=args.lora_layers, random_init=True, device=device
    )
    sync = torch.cuda.synchronize if policy.device.type == "cuda" else (lambda: None)
    candidates = [policy.encode(" " + phrase) for phrase in PHRASES]
    prompts = glam_prompts(policy, args.num_envs)
    kept: list[Any] = []

    def rollout() -> None:
        with torch.no_grad():
            scored = score_candidates(policy, prompts, candidates, "mean", keep_frozen=True)
            policy.heads["value"](scored.hidden)
        kept[:] = scored.frozen or []

    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-5)

    def update() -> None:
        samples = (kept * (args.minibatch_size // len(kept) + 1))[: args.minibatch_size]
        scored = score_from_frozen(policy, samples, candidates, "mean")
        values = policy.heads["value"](scored.hidden).squeeze(-1).float()
        loss = -torch.log_softmax(scored.scores.float(), -1)[:, 2].mean() + values.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    rollout_s = timed(rollout, args.repeats, sync)
    update_s = timed(update, args.repeats, sync)
    name = torch.cuda.get_device_name(policy.device) if policy.device.type == "cuda" else "cpu"
    return {
        "device": str(policy.device),
        "name": name,
        "bf16": policy.bf16,
        "prompt_tokens": max(len(p) for p in prompts),
        "rollout_seconds": rollout_s,
        "update_seconds": update_s,
        "rollout_env_steps_per_s": args.num_envs / rollout_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--devices",
        nargs="+",
        default=None,
        help="devices to measure (default: cpu, and cuda where torch sees a GPU)",
    )
    parser.add_argument(
        "--architecture",
        choices=("smollm2", "tiny"),
        default="smollm2",
        help="smollm2 (its architecture, random weights) or tiny (a 2-layer random Llama)",
    )
    # GLAM's settings, from its config model: prompts scored per rollout step (num_envs),
    # samples per PPO update step (minibatch_size), LoRA on the top N layers (lora_layers)
    add_model_options(
        parser,
        GlamConfig,
        ["ppo.num_envs", "ppo.minibatch_size", "ppo.lora_layers"],
        {"ppo.lora_layers": 2},
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args, _ = parse_model_options(parser, GlamConfig)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    with tempfile.TemporaryDirectory() as tmp:
        if args.architecture == "tiny":
            import sys

            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from support.tiny_llm import make_tiny_llama

            model_dir = str(make_tiny_llama(Path(tmp) / "tiny"))
        else:
            from llmrl.llm_gateway.local_models import smollm2_dir

            model_dir = str(smollm2_dir())  # only its config and tokenizer are read
        results = {device: measure(model_dir, device, args) for device in devices}
    report: dict[str, Any] = {
        "model": args.architecture,
        "envs": args.num_envs,
        "minibatch": args.minibatch_size,
        "lora_layers": args.lora_layers,
        "cpu_threads": torch.get_num_threads(),
        "devices": results,
    }
    if "cpu" in results:
        cpu = results["cpu"]
        for device, figures in results.items():
            if device != "cpu":
                report[f"rollout_speedup_{device}"] = (
                    cpu["rollout_seconds"] / figures["rollout_seconds"]
                )
                report[f"update_speedup_{device}"] = (
                    cpu["update_seconds"] / figures["update_seconds"]
                )
    for device, figures in results.items():
        print(
            f"{device} ({figures['name']}, bf16 {figures['bf16']}): rollout "
            f"{figures['rollout_seconds']:.3f} s for {args.num_envs} prompts, update "
            f"{figures['update_seconds']:.3f} s for {args.minibatch_size} samples"
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
