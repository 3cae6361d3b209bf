"""Token rows as one padded batch: the gateway's local backend and the learner's scorer both
feed variable-length prompts and continuations to one forward pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pad(rows: Sequence[Sequence[int]], pad_id: int, left: bool = True) -> tuple[Any, Any]:
    """Token rows as one (ids, attention mask) batch of torch tensors, padded on the left
    (prompts, so that generation continues every row at the same column) or on the right
    (continuations)."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        cols = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, cols] = torch.tensor(list(row), dtype=torch.long)
        mask[i, cols] = 1
    return ids, mask
