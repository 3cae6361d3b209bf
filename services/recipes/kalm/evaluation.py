"""Batched evaluation of an offline policy: every evaluation episode of a level at once, in one
simulator world per env setting (the fast path: one batched policy call and one world step per
time step, instead of one episode job per episode).

Env i of a world is seeded `seed + i`, so every policy meets the same start states, goals and
instructions. Each env's first episode counts (its later auto-resets are ignored: the env is
stepped `active` only until its first LAST step). Instructions are embedded once per distinct
text through the gateway. The figures match `llmrl.recipes.summary.summarize`'s names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from llmrl.recipes.summary import wilson_interval

LAST = 2
OBSERVATIONS = ["state", "instruction", "success", "reward", "step_type"]


def play_world(
    world: Any,
    policy: Any,
    embed: Callable[[list[str]], np.ndarray] | None,
    seed: int,
) -> dict[str, np.ndarray]:
    """Play one episode in every env of `world`: per env success, return and length."""
    obs = world.reset(seed=seed, observations=OBSERVATIONS)
    n = len(obs["state"])
    embeddings = None
    if policy.embedding_dim:
        texts = [str(t) for t in obs["instruction"]]
        unique = sorted(set(texts))
        vectors = np.asarray(embed(unique), np.float32)
        embeddings = vectors[[unique.index(t) for t in texts]]
    done = np.zeros(n, bool)
    success = np.zeros(n, bool)
    returns = np.zeros(n, np.float64)
    lengths = np.zeros(n, np.int64)
    while not done.all():
        actions = np.asarray(policy.act(obs["state"], embeddings))
        obs = world.step(action=actions, observations=OBSERVATIONS, active=~done)
        running = ~done
        returns[running] += obs["reward"][running]
        lengths[running] += 1
        success[running] |= np.asarray(obs["success"])[running] == 1
        done |= running & (np.asarray(obs["step_type"]) == LAST)
    return {"success": success, "returns": returns, "lengths": lengths}


def summarize_batch(results: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    success = np.concatenate([r["success"] for r in results])
    returns = np.concatenate([r["returns"] for r in results])
    lengths = np.concatenate([r["lengths"] for r in results])
    n = len(success)
    low, high = wilson_interval(int(success.sum()), n)
    return {
        "episodes": n,
        "success_rate": float(success.mean()),
        "success_ci95": f"[{low:.2f}, {high:.2f}]",
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "mean_length": float(lengths.mean()),
    }
