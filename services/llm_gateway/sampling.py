"""Sampling per batch row, so that requests with different settings share a forward pass.

transformers' `generate` samples every row of a batch from one global random stream, so a
seeded request's answer would depend on what else shares its batch. `RowSampler` instead
draws each row's token from that row's own `torch.Generator` (seeded from the request's
seed and the row's index among its n answers), with the row's own temperature and top-p,
and leaves a one-hot distribution that greedy decoding then follows. A seeded request
therefore gives the same answer alone or batched (up to the last bits of floating point that
padding can change), and greedy, seeded and unseeded requests batch together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor

_GOLDEN = 0x9E3779B97F4A7C15  # spreads (seed, answer index) over 64 bits


@dataclass(frozen=True)
class RowSampling:
    temperature: float  # 0: greedy (the row is left alone)
    top_p: float = 1.0
    seed: int | None = None  # None: a fresh random seed
    index: int = 0  # which of the request's n answers this row is


def row_generator(sampling: RowSampling, device: torch.device) -> torch.Generator:
    if sampling.seed is None:
        seed = random.getrandbits(63)
    else:
        seed = (sampling.seed + sampling.index * _GOLDEN) % 2**63
    return torch.Generator(device=device).manual_seed(seed)


class RowSampler(LogitsProcessor):
    """Samples every row with temperature > 0 from its own generator (run it last)."""

    def __init__(self, rows: list[RowSampling]) -> None:
        self.rows = rows
        self.generators: list[torch.Generator | None] | None = None  # made on the logits' device

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.generators is None:
            self.generators = [
                row_generator(r, scores.device) if r.temperature > 0 else None for r in self.rows
            ]
        for row, (sampling, generator) in enumerate(zip(self.rows, self.generators, strict=True)):
            if generator is None:
                continue
            probs = torch.softmax(scores[row].float() / sampling.temperature, dim=-1)
            if sampling.top_p < 1.0:
                probs = _top_p(probs, sampling.top_p)
            token = int(torch.multinomial(probs, 1, generator=generator))
            scores[row] = float("-inf")
            scores[row, token] = 0.0
        return scores


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the most likely tokens whose mass reaches top_p (at least one), renormalised."""
    sorted_probs, order = torch.sort(probs, descending=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass ahead of each token
    sorted_probs[before >= top_p] = 0.0
    kept = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return kept / kept.sum()
