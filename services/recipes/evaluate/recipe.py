"""`evaluate`'s phases: play the episodes (resumable episode by episode), then the report."""

from __future__ import annotations

from typing import Any

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.context import RunContext
from llmrl.recipes.evaluate.config import EvaluateConfig
from llmrl.recipes.evaluate.report import plot_episodes
from llmrl.recipes.results import Results
from llmrl.recipes.summary import summarize

PLAY, REPORT = "evaluate", "report"


@registry.register_recipe("evaluate", "N episodes of a planner on an env: success, return, cost")
class Evaluate(Recipe):
    Config = EvaluateConfig
    config: EvaluateConfig
    headline_metrics = (
        "success_rate",
        "mean_return",
        "mean_length",
        "llm_calls_per_episode",
        "cost_per_episode_usd",
    )

    def phases(self) -> list[Phase]:
        return [
            Phase(PLAY, self.play, "play the episodes"),
            Phase(REPORT, self.report, "results table, JSON and plot"),
        ]

    def play(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        policy = cfg.policy_spec()
        jobs = [
            ctx.episode_job(
                PLAY,
                i,
                env=cfg.env,
                seed=cfg.seed + i,
                policy=policy,
                env_kwargs=cfg.env_kwargs,
                max_steps=cfg.max_steps,
            )
            for i in range(cfg.episodes)
        ]
        records = ctx.run_episodes(PLAY, jobs, parallel=cfg.num_envs)
        summary = summarize(records)
        ctx.set_summary(**summary)
        return summary

    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        records = ctx.store.episodes(ctx.run_id, phase=PLAY)
        summary = summarize(records)
        row = {"env": cfg.env, "planner": cfg.policy_label(), **summary}
        plot = "evaluate.png"
        label = cfg.policy_label()
        plot_episodes(records, ctx.plot_path(plot), f"{label} on {cfg.env}")
        results = Results(
            title=f"evaluate: {label} on {cfg.env}",
            rows=[row],
            notes=[
                f"{summary['episodes']} episodes, seeds {cfg.seed}..{cfg.seed + cfg.episodes - 1}",
                "success_ci95: Wilson 95% interval of the success rate",
            ],
            plots=[plot],
        )
        ctx.write_results(results)
        writer = ctx.tensorboard
        if writer is not None:
            writer.add_scalar("charts/success_rate", summary["success_rate"], 0)
            writer.add_scalar("charts/mean_return", summary["mean_return"], 0)
        return {"results": "results.json"}
