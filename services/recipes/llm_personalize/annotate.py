"""The annotate phases: the episodes a phase stored, turned into SFT data (`datasets.py`).

annotate/0 builds the bootstrap data from the demonstrations; annotate/k the self-training
selection of round k's collected episodes (`selection`: by episode or by query). Each dataset
is a run artifact; its statistics (queries, episodes that raised placements, examples) go to
the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.recipes.context import RunContext
from llmrl.recipes.llm_personalize.config import LlmPersonalizeConfig
from llmrl.recipes.llm_personalize.datasets import (
    build_bootstrap_dataset,
    build_self_training_dataset,
)


class AnnotatePhases:
    """The recipe's annotate/<k> phases (mixed into `LlmPersonalize`)."""

    config: LlmPersonalizeConfig

    def _annotate(self, k: int):
        def run(ctx: RunContext) -> dict[str, Any]:
            out = ctx.out_dir / "datasets"
            if k == 0:
                records = ctx.store.episodes(ctx.run_id, phase="demonstrate")
                built = build_bootstrap_dataset(
                    records, out, "bootstrap", dedupe=self.config.bootstrap_dedupe
                )
            else:
                records = ctx.store.episodes(ctx.run_id, phase=f"collect/{k}")
                cfg = self.config
                built = build_self_training_dataset(
                    records,
                    out,
                    f"round-{k}",
                    min_placement_gain=cfg.min_placement_gain,
                    selection=cfg.selection,
                )
            add_dataset_artifact(ctx, built["data"])
            stats = built["stats_data"]
            return {"data": built["data"], "examples": stats["examples"], "stats": stats}

        return run


def add_dataset_artifact(ctx: RunContext, data: str) -> None:
    """Register a dataset file the run wrote as its artifact `datasets/<file name>`."""
    ctx.add_artifact(f"datasets/{Path(data).name}", data, "dataset")
