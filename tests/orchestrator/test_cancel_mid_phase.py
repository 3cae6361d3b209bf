"""A cancelled run stops inside a long phase (at its next progress report), not after it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

import pytest

from llmrl.common.registry import registry
from llmrl.common.store import RunStore
from llmrl.orchestrator.embedded import RunFailed, run_embedded
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.config import RecipeConfig
from llmrl.recipes.context import RunContext


class LongPhaseConfig(RecipeConfig):
    steps: int = 2000
    cancel_at: int = 5


@registry.register_recipe("test-long-phase", "a training-like phase that reports progress")
class LongPhase(Recipe):
    Config = LongPhaseConfig
    steps_taken: ClassVar[int] = 0

    def phases(self) -> list[Phase]:
        return [Phase("train", self.train), Phase("after", lambda ctx: {"ran": True})]

    def train(self, ctx: RunContext) -> dict:
        ctx.progress.start("train", self.config.steps, unit="steps")
        for step in range(1, self.config.steps + 1):
            if step == self.config.cancel_at:  # `llmrl cancel` from elsewhere sets the flag
                ctx.store.update_run(ctx.run_id, cancel_requested=True)
            time.sleep(0.005)
            type(self).steps_taken = step
            ctx.progress.advance(1)  # a training loop's on_progress
        return {"steps": self.config.steps}


def test_a_cancel_stops_a_long_phase_at_its_next_progress_report(tmp_path: Path):
    LongPhase.steps_taken = 0
    with pytest.raises(RunFailed) as ended:
        run_embedded("test-long-phase", {}, out_dir=tmp_path, progress=False)
    assert ended.value.status == "cancelled"
    assert LongPhase.steps_taken < 2000  # it did not train to the end first
    store = RunStore(tmp_path / "run.sqlite")
    (run,) = store.list_runs()
    assert run.status == "cancelled"
    assert store.phase_outputs(run.run_id, "train") is None  # the phase did not complete
    assert store.phase_outputs(run.run_id, "after") is None
    store.close()


def test_without_a_cancel_the_phase_runs_to_its_end(tmp_path: Path):
    LongPhase.steps_taken = 0
    run = run_embedded(
        "test-long-phase", {"steps": 50, "cancel_at": 0}, out_dir=tmp_path, progress=False
    )
    assert run.status == "completed" and LongPhase.steps_taken == 50
