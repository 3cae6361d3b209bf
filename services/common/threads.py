"""Torch's intra-op thread count, set for one stretch of work in this process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the body with torch on `threads` threads, then restore the count it had.

    A small MLP policy trains fastest on one thread (more contend for its tiny matrices), and
    a fixed count keeps a seeded run's figures the same on machines with other core counts:
    torch splits reductions by thread, so the rounding, and with it PPO's trajectory, differs.
    The count is process-wide: recipes use this around their own embedded training only, and
    jobs on the learner service keep the learner's setting (their `torch_threads`, if any).
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
