"""An evaluation's episodes in a few numbers: success rate with its Wilson interval, return,
length and LLM use per episode. Shared by the recipes whose tables report episodes the same way
(evaluate, glam, grpo, kalm), so that their columns mean the same."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmrl.common.episodes import EpisodeRecord


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(records: list[EpisodeRecord]) -> dict[str, Any]:
    n = len(records)
    returns = np.array([r.episode_return for r in records], dtype=float)
    lengths = np.array([r.length for r in records], dtype=float)
    successes = sum(r.success for r in records)
    low, high = wilson_interval(successes, n)
    calls = sum(len(r.llm_calls) for r in records)
    tokens = sum(c.prompt_tokens + c.completion_tokens for r in records for c in r.llm_calls)
    cost = sum(c.cost_usd for r in records for c in r.llm_calls)
    per = (lambda x: x / n) if n else (lambda x: math.nan)
    return {
        "episodes": n,
        "success_rate": per(successes),
        "success_ci95": f"[{low:.2f}, {high:.2f}]",
        "mean_return": float(returns.mean()) if n else math.nan,
        "std_return": float(returns.std()) if n else math.nan,
        "mean_length": float(lengths.mean()) if n else math.nan,
        "llm_calls_per_episode": per(calls),
        "tokens_per_episode": per(tokens),
        "cost_per_episode_usd": per(cost),
    }
