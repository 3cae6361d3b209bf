"""What pinning MKL's code path costs: the `llmrl` command's pins against MKL's compatible
branch (the pin under which two kinds of x86 CPU compute SmolLM2 to the same bits), that
branch with torch's fused Adam kernel, and no pins at all.

Each setting runs in its own process (MKL reads its branch once, when it loads), in rounds
that alternate the settings so that other load on the machine falls on all of them alike:
- `pinned`: the pins `llmrl` sets by default (`MKL_CBWR=AVX2`, ATen's and oneDNN's AVX2);
- `compatible`: the same pins with `MKL_CBWR=COMPATIBLE`;
- `compatible_fused`: that, and `LLMRL_ADAM=fused` (Adam's square root out of MKL's vector
  math, whose rounding is the one op the compatible branch leaves to the CPU's vendor);
- `unpinned`: `LLMRL_PIN_CPU_PATHS=0`, every path left to the libraries.
Per setting, the median seconds of: scoring (a forward of SmolLM2-135M over 4 sequences of
about 60 tokens, as a `/v1/score` request of 4 candidates), generating 16 tokens greedily
after one prompt, one LoRA-free training step of SmolLM2 (forward and backward of the LM
loss on 4 sequences, as GLAM's and the SFTs' updates), and 400 Adam steps of a small MLP (the
DQN/BC networks of ELLM, When2Ask and KALM). Whether each setting's logits are the pinned
setting's bits is printed too: a branch that changes nothing is not worth its cost.

    python bench/cpu_paths.py [--rounds 3] [--threads 2]

The last line is one JSON object: the CPU, seconds per task and setting, and each setting's
time as a ratio of `pinned`'s (above 1: slower).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from llmrl.common.numerics import ADAM_ENV, CPU_PINS, PIN_SWITCH_ENV

SETTINGS: dict[str, dict[str, str]] = {
    "pinned": {},
    "compatible": {"MKL_CBWR": "COMPATIBLE"},
    "compatible_fused": {"MKL_CBWR": "COMPATIBLE", ADAM_ENV: "fused"},
    "unpinned": {PIN_SWITCH_ENV: "0"},
}
TASKS = ("score", "generate", "train_step", "mlp_adam")
PROMPT = (
    "You are in a room. You see a red ball two steps ahead and a blue key on your left. "
    "Your goal: go to the red ball. Which action is best? Answer with one action: "
)


def measure(threads: int) -> dict[str, Any]:
    """In this process (already pinned as its setting says): seconds per task, logits digest."""
    from llmrl.common.numerics import adam_options, pin_cpu_paths

    pin_cpu_paths()  # before torch loads MKL: the branch is read once
    import hashlib
    import time

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmrl.llm_gateway.local_models import smollm2_dir

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    path = smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    candidates = ["go forward", "turn left", "turn right", "pick up the blue key"]
    batch = tokenizer([PROMPT + c for c in candidates], return_tensors="pt", padding=True)
    prompt = tokenizer(PROMPT, return_tensors="pt")

    def timed(task: Any) -> float:
        task()  # warm: first calls allocate and pick kernels
        start = time.perf_counter()
        task()
        return time.perf_counter() - start

    def score() -> Any:
        with torch.no_grad():
            return model(**batch).logits

    def generate() -> None:
        with torch.no_grad():
            model.generate(**prompt, max_new_tokens=16, min_new_tokens=16, do_sample=False)

    def train_step() -> None:
        model.zero_grad()
        model(**batch, labels=batch["input_ids"]).loss.backward()

    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 17))
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-3, **adam_options())
    x, y = torch.randn(32, 64), torch.randn(32, 17)

    def mlp_adam() -> None:
        for _ in range(400):
            optimiser.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            optimiser.step()

    seconds = {
        "score": timed(score),
        "generate": timed(generate),
        "train_step": timed(train_step),
        "mlp_adam": timed(mlp_adam),
    }
    logits = score().numpy().tobytes()
    return {"seconds": seconds, "logits": hashlib.sha256(logits).hexdigest()[:16]}


def run_setting(name: str, threads: int) -> dict[str, Any]:
    # each setting starts from no pins of the caller's own, so "unpinned" is unpinned
    cleared = {*CPU_PINS, PIN_SWITCH_ENV, ADAM_ENV}
    env = {k: v for k, v in os.environ.items() if k not in cleared}
    env.update(SETTINGS[name])
    done = subprocess.run(
        [sys.executable, __file__, "--measure", "--threads", str(threads)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name}: the measuring process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per setting")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in each")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.threads)))
        return

    from llmrl.common.provenance import cpu_model

    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    for round_ in range(args.rounds):
        for name in SETTINGS:  # alternate, so that other load falls on every setting alike
            samples[name].append(run_setting(name, args.threads))
            print(f"round {round_ + 1}/{args.rounds}: {name} done", file=sys.stderr)
    seconds = {
        name: {task: statistics.median(s["seconds"][task] for s in runs) for task in TASKS}
        for name, runs in samples.items()
    }
    reference = samples["pinned"][0]["logits"]
    same_logits = {
        name: all(s["logits"] == reference for s in runs) for name, runs in samples.items()
    }
    ratios = {
        name: {task: round(seconds[name][task] / seconds["pinned"][task], 3) for task in TASKS}
        for name in SETTINGS
        if name != "pinned"
    }
    print(f"{'task':<12}" + "".join(f"{name:>14}" for name in SETTINGS))
    for task in TASKS:
        print(f"{task:<12}" + "".join(f"{seconds[n][task]:>13.3f}s" for n in SETTINGS))
    print(
        json.dumps(
            {
                "cpu": cpu_model(),
                "threads": args.threads,
                "rounds": args.rounds,
                "seconds": {n: {t: round(v, 4) for t, v in s.items()} for n, s in seconds.items()},
                "ratio_to_pinned": ratios,
                "logits_bits_as_pinned": same_logits,
            }
        )
    )


if __name__ == "__main__":
    main()
