"""CrafterText's env-steps/s against crafter itself, in one run.

    .venv/bin/python bench/crafter_text.py [--steps 3000] [--num-envs 4]

Times random actions in: crafter.Env (renders its 64x64 image every step), CrafterText without
and with pixels (one env each), and a world of `--num-envs` CrafterText envs (in-process). The
last line is a JSON object with the steps/s and the ratios to crafter.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from llmrl.simulator.envs.crafter.env import CrafterTextEnv
from llmrl.simulator.world import World


def timed(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps per measurement")
    parser.add_argument("--num-envs", type=int, default=4, help="envs in the world")
    args = parser.parse_args()
    import crafter

    rng = np.random.default_rng(0)
    actions = iter(rng.integers(0, 17, 10 * args.steps + 10).tolist())
    results: dict[str, float] = {}
    raw = crafter.Env(seed=0)
    raw.reset()
    results["crafter_pixels"] = timed(lambda: raw.step(next(actions)), args.steps)
    for name, pixels in (("crafter_text", False), ("crafter_text_pixels", True)):
        env = CrafterTextEnv(pixels=pixels)
        env.reset(seed=0)
        results[name] = timed(lambda env=env: env.step(next(actions)), args.steps)
    with World("CrafterText", num_envs=args.num_envs, seed=0) as world:
        world.reset()
        batches = max(1, args.steps // args.num_envs)
        batch = lambda: world.step(rng.integers(0, 17, args.num_envs))  # noqa: E731
        results[f"world_{args.num_envs}_envs"] = timed(batch, batches) * args.num_envs
    summary = {key: round(value, 1) for key, value in results.items()}
    summary["text_over_crafter"] = round(results["crafter_text"] / results["crafter_pixels"], 2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
