"""Policy job kinds for the learner's tests, registered on import: `test-block` never reports
(a job stuck loading a model, or in a long first update) and `test-count` reports every step.

The learner runs each job in a spawned child process: unpickling a request imports this module
there too (tests/ is on the child's path), so both sides know the kinds."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmrl.common.registry import registry


class BlockingJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["test-block"] = "test-block"
    marker: str = Field(..., description="a file the job writes once it runs (its pid)")


@registry.register_policy_job("test-block", request=BlockingJob)
def block_forever(job: BlockingJob, report: Callable[[int], None]) -> dict[str, Any]:
    """Blocks without ever reporting progress, and ignores SIGTERM's default too (a native
    call can hold a thread this way): only a kill stops it."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(job.marker).write_text(str(os.getpid()))
    while True:
        time.sleep(1)


class CountingJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["test-count"] = "test-count"
    steps: int = Field(..., ge=1, le=1_000_000)
    step_s: float = Field(0.0, ge=0, le=10)


@registry.register_policy_job("test-count", request=CountingJob)
def count_steps(job: CountingJob, report: Callable[[int], None]) -> dict[str, Any]:
    """Reports one step at a time; returns how many it made and where it ran."""
    for _ in range(job.steps):
        time.sleep(job.step_s)
        report(1)
    return {"steps": job.steps, "pid": os.getpid()}
