"""The recipe framework: what a recipe is, what a phase gets, and how results are written.

A recipe is registered by name and has a pydantic config model and an ordered list of
phases:

    class MyConfig(RecipeConfig):
        env: str = Field("SimpleDoorKey", description="registered environment id")
        episodes: int = Field(20, ge=1, description="episodes per evaluation")

    @registry.register_recipe("my-recipe")
    class MyRecipe(Recipe):
        Config = MyConfig

        def phases(self) -> list[Phase]:
            return [Phase("collect", self.collect), Phase("report", self.report)]

        def collect(self, ctx: RunContext) -> dict:
            records = ctx.run_episodes("collect", [ctx.episode_job("collect", i, ...) ...])
            return {"episodes": len(records)}        # the phase's outputs, persisted

Phases run in order (collect → annotate → train → evaluate, repeated per self-training round
with names like "collect/1"); each is resumable. A completed phase is never run again: its
outputs are kept in the run store (`ctx.phase_outputs(name)` reads them in later phases).
Episode jobs are named `<phase>/<index>`, so a phase interrupted half-way and run again only
plays the episodes that are not stored yet. Phases should therefore be deterministic given
the config (seeds derived from `config.seed` and the episode index).

The run context hides the mode: in embedded mode episodes are played in-process, in service
mode they go through the Redis queue to rollout workers; either way `run_episodes` returns
the stored records, in index order. Training likewise: `ctx.train(job, train_here, ...)` runs
a job in this process, or on the learner service where one is configured.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from llmrl.recipes.config import RecipeConfig

if TYPE_CHECKING:
    from llmrl.recipes.context import RunContext
    from llmrl.recipes.targets import ConfigResults, Verdict


@dataclass
class Phase:
    name: str  # unique within the recipe; "<kind>" or "<kind>/<round>", e.g. "collect/2"
    run: Callable[[RunContext], dict[str, Any] | None]
    description: str = ""


class Recipe(ABC):
    Config: ClassVar[type[RecipeConfig]] = RecipeConfig
    # The results table's columns that experiment reports aggregate over seeds (mean, 95%
    # bootstrap interval, IQM; `llmrl compare`); None: every numeric column.
    headline_metrics: ClassVar[tuple[str, ...] | None] = None
    # Config keys that choose which of a run's independent parts it computes, not what any
    # part computes (grpo's `methods`): reports take runs that differ only there as one config,
    # their rows of one seed side by side, so a comparison longer than one sitting can be run,
    # and kept, part by part. A row two parts of a seed both give is the first run's.
    part_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: RecipeConfig) -> None:
        self.config = config

    @abstractmethod
    def phases(self) -> list[Phase]:
        """The ordered phases of a run of this recipe (may depend on the config)."""

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        """The recipe's claims judged on one config's results over its seeds
        (`llmrl.recipes.targets`); those whose rows the config lacks are left out."""
        return []
