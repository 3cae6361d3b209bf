"""LoRA SFT memory and speed at llm-personalize scale: activations kept or recomputed
(gradient checkpointing), and LoRA on every layer or only the top ones.

Trains SmolLM2-135M (the gateway's default local model) for a few steps on chat examples as
long as late Housekeep contexts (every room explored: ~1.2k tokens), once per setting, each
in its own process so that peak resident memory (ru_maxrss) is that setting's alone:
`kept` (no checkpointing), `checkpointed` (the default), `top_layers` (checkpointed, LoRA on
the top --lora-layers layers). Prints one JSON object on its last line: peak GB per setting,
and the memory and step-time ratios checkpointed / kept and top_layers / checkpointed.

    python bench/sft_memory.py [--tokens 1200] [--batch-size 4] [--steps 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llmrl.learner.algorithms.sft import SftSettings

SETTINGS = ("kept", "checkpointed", "top_layers")


def long_examples(count: int, tokens: int) -> list[dict]:
    """Chat examples whose user turn is about `tokens` tokens of Housekeep-like context."""
    line = "- in bedroom_1: bed_2 (empty); chair_2 (tennis_ball_1); chest_3 (empty)\n"
    context = line * max(1, tokens // 25)  # ~25 tokens per line
    plan = "1. go to tennis_ball_1\n2. pick up tennis_ball_1\n3. go to chest_1"
    return [
        {
            "messages": [
                {"role": "system", "content": "You are a household robot tidying up."},
                {"role": "user", "content": f"{context}Plan {i}?"},
                {"role": "assistant", "content": plan},
            ]
        }
        for i in range(count)
    ]


def run_one(args: argparse.Namespace, setting: str) -> dict:
    """Train in this process and report (the child side)."""
    import torch

    from llmrl.learner.adapters import base_model_dir
    from llmrl.learner.algorithms.sft import SftConfig, train_lora_sft

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.jsonl"
        examples = long_examples(args.batch_size * args.steps, args.tokens)
        data.write_text("".join(json.dumps(e) + "\n" for e in examples))
        started = time.perf_counter()
        result = train_lora_sft(
            SftConfig(
                data=str(data),
                base_model=str(base_model_dir("smollm2")),
                out_dir=str(Path(tmp) / "adapter"),
                steps=args.steps,
                batch_size=args.batch_size,
                max_length=args.tokens * 2,
                bf16=False,
                gradient_checkpointing=setting != "kept",
                lora_layers=args.lora_layers if setting == "top_layers" else None,
            )
        )
        seconds = time.perf_counter() - started
    return {
        "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "seconds_per_step": seconds / result.steps,
        "examples": result.examples,
    }


def add_sft_option(parser: argparse.ArgumentParser, name: str, **overrides: Any) -> None:
    """`--<name>`: the SFT setting `name`, its default and help from `SftSettings` unless
    `overrides` give the bench's own."""
    setting = SftSettings.model_fields[name]
    options = {"default": setting.default, "help": setting.description, **overrides}
    flag = f"--{name.replace('_', '-')}"
    parser.add_argument(flag, type=int, default=options["default"], help=options["help"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=1200, help="tokens per example")
    add_sft_option(parser, "batch_size")
    add_sft_option(parser, "steps", default=2, help="SFT steps timed per setting")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    add_sft_option(parser, "lora_layers", default=8, help="top_layers: LoRA on the top N layers")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args, args.child)))
        return

    figures = {}
    for setting in SETTINGS:
        options = {"--tokens": args.tokens, "--batch-size": args.batch_size,
                   "--steps": args.steps, "--threads": args.threads,
                   "--lora-layers": args.lora_layers}  # fmt: skip
        command = [sys.executable, __file__, "--child", setting]
        command += [str(part) for option in options.items() for part in option]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        figures[setting] = json.loads(output.strip().splitlines()[-1])
        print(setting, figures[setting], flush=True)
    kept, checkpointed, top = figures["kept"], figures["checkpointed"], figures["top_layers"]
    settings = {"tokens": args.tokens, "batch_size": args.batch_size, "threads": args.threads,
                "lora_layers": args.lora_layers}  # fmt: skip
    print(
        json.dumps(
            {
                "settings": settings,
                **{f"{name}_peak_gb": round(f["peak_gb"], 2) for name, f in figures.items()},
                "peak_memory_ratio": round(checkpointed["peak_gb"] / kept["peak_gb"], 3),
                "step_time_ratio": round(
                    checkpointed["seconds_per_step"] / kept["seconds_per_step"], 3
                ),
                "top_layers_step_time_ratio": round(
                    top["seconds_per_step"] / checkpointed["seconds_per_step"], 3
                ),
                "top_layers_peak_memory_ratio": round(top["peak_gb"] / checkpointed["peak_gb"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
