"""Novelty rewards, ELLM's baselines: RND and APT-style kNN novelty.

Both read the agent's numeric observation (the local map one-hot per cell, the inventory
and the achievements scaled by their bounds: `StateFeatures`) for a batch of N envs and
return one reward per env.

* `RndReward` (Burda et al. 2019): a fixed random network and a predictor trained online to
  match it; the reward is the predictor's error, divided by a running standard deviation of
  that error so that its scale stays near 1 as the predictor learns.
* `KnnNoveltyReward` (APT, Liu & Abbeel 2021): the states are embedded by a fixed random
  projection; the reward is log(1 + mean distance to the k nearest of the last `memory`
  embedded states), the particle-based entropy estimate of APT without its learned encoder.

Each has `state_dict`/`load_state_dict` (tensors only), so a resumed pretraining keeps them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmrl.common.numerics import adam_options


class StateFeatures:
    """The agent's observation as one float vector per env: entries with ids (the local map)
    one-hot per cell, the others scaled by their bound (`describe_space`'s description)."""

    def __init__(self, described: dict[str, dict[str, Any]]) -> None:
        self.described = described
        self.keys = sorted(described)
        self.width = sum(
            int(np.prod(e["shape"], dtype=np.int64)) * int(e.get("ids", 1))
            for e in described.values()
        )

    def __call__(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        parts = []
        for key in self.keys:
            entry = self.described[key]
            values = np.asarray(observations[key])
            flat = values.reshape(len(values), -1)
            if "ids" in entry:
                ids = np.clip(flat, 0, entry["ids"] - 1).astype(np.int64)
                parts.append(np.eye(entry["ids"], dtype=np.float32)[ids].reshape(len(values), -1))
            else:
                parts.append(flat.astype(np.float32) * float(entry["scale"]))
        return np.concatenate(parts, axis=1)


def _mlp(width: int, hidden: int, out: int) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, out),
    )  # fmt: skip


class RndReward:
    """Random network distillation over the state features (see module docstring)."""

    name = "rnd"

    def __init__(
        self,
        described: dict[str, dict[str, Any]],
        seed: int = 0,
        hidden: int = 128,
        out: int = 64,
        learning_rate: float = 1e-3,
    ) -> None:
        import torch

        self.features = StateFeatures(described)
        generator_state = torch.get_rng_state()
        torch.manual_seed(seed)
        self.target = _mlp(self.features.width, hidden, out)
        self.predictor = _mlp(self.features.width, hidden, out)
        torch.set_rng_state(generator_state)
        for parameter in self.target.parameters():
            parameter.requires_grad_(False)
        self.optimizer = torch.optim.Adam(
            self.predictor.parameters(), lr=learning_rate, **adam_options()
        )
        # running mean/var of the raw error (Welford over batches), for the normalisation
        self.count, self.mean, self.m2 = 1e-4, 0.0, 0.0

    def __call__(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        x = torch.as_tensor(self.features(observations))
        with torch.no_grad():
            target = self.target(x)
        error = ((self.predictor(x) - target) ** 2).mean(dim=1)
        self.optimizer.zero_grad(set_to_none=True)
        error.mean().backward()
        self.optimizer.step()
        raw = error.detach().numpy().astype(np.float64)
        self._update_moments(raw)
        std = np.sqrt(self.m2 / self.count) if self.count > 1 else 1.0
        return (raw / max(std, 1e-8)).astype(np.float32)

    def _update_moments(self, values: np.ndarray) -> None:
        batch_mean, batch_var, n = float(values.mean()), float(values.var()), len(values)
        delta, total = batch_mean - self.mean, self.count + n
        self.mean += delta * n / total
        self.m2 += batch_var * n + delta**2 * self.count * n / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {
            "target": self.target.state_dict(),
            "predictor": self.predictor.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "moments": torch.tensor([self.count, self.mean, self.m2], dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.target.load_state_dict(state["target"])
        self.predictor.load_state_dict(state["predictor"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.count, self.mean, self.m2 = (float(x) for x in state["moments"])


class KnnNoveltyReward:
    """APT-style particle novelty over randomly projected state features (module docstring)."""

    name = "knn"

    def __init__(
        self,
        described: dict[str, dict[str, Any]],
        seed: int = 0,
        k: int = 12,
        memory: int = 10_000,
        dim: int = 32,
    ) -> None:
        import torch

        self.features = StateFeatures(described)
        generator = torch.Generator().manual_seed(seed)
        width = self.features.width
        self.projection = torch.randn(width, dim, generator=generator) / np.sqrt(width)
        self.k, self.capacity = k, memory
        self.memory = torch.zeros(memory, dim)
        self.size, self.position = 0, 0

    def __call__(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        z = torch.as_tensor(self.features(observations)) @ self.projection
        if self.size == 0:
            rewards = np.zeros(len(z), np.float32)
        else:
            distances = torch.cdist(z, self.memory[: self.size])
            k = min(self.k, self.size)
            nearest = distances.topk(k, dim=1, largest=False).values
            rewards = torch.log1p(nearest.mean(dim=1)).numpy().astype(np.float32)
        for vector in z:  # remember the batch (a ring of the last `memory` states)
            self.memory[self.position] = vector
            self.position = (self.position + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
        return rewards

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {
            "projection": self.projection,
            "memory": self.memory,
            "ring": torch.tensor([self.size, self.position]),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.projection = state["projection"]
        self.memory = state["memory"]
        self.size, self.position = (int(x) for x in state["ring"])
