"""Torch's intra-op thread count, set for one stretch of work in this process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Annotated

from pydantic import Field

# A policy job's own thread count. The recipe sets it (1 for a small MLP) so that the learner's
# job process trains on as many threads as the embedded run does: the learner's default is
# every core, and a reduction split another way rounds otherwise (same seed, other bits).
TorchThreads = Annotated[
    int | None,
    Field(
        ge=1,
        le=1024,
        description="torch threads the job trains on (None: its process's count)",
    ),
]


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


def job_threads(threads: int | None) -> AbstractContextManager[None]:
    """`torch_threads(threads)` for a job that sets its count, else nothing changed. A job on
    the learner runs in a process of its own (`llmrl.learner.job_process`), so the count it
    sets is the job's alone."""
    return torch_threads(threads) if threads else nullcontext()


def torch_thread_count() -> int:
    """Torch's intra-op thread count in this process now."""
    import torch

    return torch.get_num_threads()
