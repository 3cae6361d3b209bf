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
    The count is the calling thread's (OpenMP's and MKL's settings are per thread; a thread
    that has not computed yet starts from the count last set anywhere in the process), so a
    thread that must compute on a stated count whatever others set, as the gateway's model
    threads do, sets it itself (`stated_thread_count`).
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


def stated_thread_count(threads: int | None = None) -> int:
    """A thread count that does not depend on what else the process did: `threads`, else
    $OMP_NUM_THREADS, else the cores this process may use. The gateway's local models compute
    on it in every mode: embedded, a policy training on one thread in the same process would
    otherwise hand its count to a model thread started during that training, and scores of
    long prompts differ in their last bits between 1 and 2 threads on some CPUs (a 2-core
    Intel Xeon, 2026-12-06), so answers differed from the same run's under `llmrl up`."""
    if threads is not None:
        return threads
    from llmrl.common.config import env_int
    from llmrl.common.provenance import usable_cores

    return env_int("OMP_NUM_THREADS", usable_cores() or 1, minimum=1, what="a thread count")
