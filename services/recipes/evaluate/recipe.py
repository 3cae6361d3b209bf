"""`evaluate`: N episodes of a planner on an environment → success, return, length, LLM use.

The simplest recipe and the template for the others: one phase plays the episodes (resumable
episode by episode), one phase turns the stored records into the results table, JSON and a
plot. `llmrl run evaluate env=SimpleDoorKey planner=oracle episodes=20 --out runs/demo`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from llmrl.common.bounds import Episodes, Seed, limit
from llmrl.common.episodes import EpisodeRecord
from llmrl.common.registry import registered_name, registry
from llmrl.recipes.base import (
    Phase,
    Recipe,
    RecipeConfig,
    Results,
    RunContext,
    check_planner_model,
    confined_kwargs,
)

PLAY, REPORT = "evaluate", "report"


class EvaluateConfig(RecipeConfig):
    env: str = Field("SimpleDoorKey", description="Registered environment id (`llmrl envs`).")
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the environment."
    )
    planner: str = Field("oracle", description="Registered planner name.")
    planner_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of the planner (e.g. model for LLM planners).",
    )
    policy: dict[str, Any] | None = Field(
        None,
        description="Instead of a planner: a policy spec {kind, name/..., kwargs} of a "
        "registered policy kind (e.g. a recipe's trained policy); overrides planner.",
    )
    episodes: Episodes = Field(20, description="Episodes to play.")
    seed: Seed = Field(0, description="Seed of episode 0; episode i uses seed + i.")
    num_envs: int = Field(
        1,
        ge=1,
        le=64,
        description="Episodes played at once, each in its own env (embedded mode: threads, "
        "whose LLM calls the gateway batches; service mode: the rollout workers decide).",
    )
    max_steps: Annotated[int | None, limit("episode_steps")] = Field(
        None, ge=1, description="Cap on low-level steps per episode (default: the env's limit)."
    )

    @field_validator("env")
    @classmethod
    def _env_is_registered(cls, value: str) -> str:
        from llmrl.common.plugins import load_plugins

        load_plugins()
        return registered_name("env", value)

    @field_validator("planner")
    @classmethod
    def _planner_is_registered(cls, value: str) -> str:
        return registered_name("planner", value)

    @field_validator("env_kwargs", "planner_kwargs")
    @classmethod
    def _paths_are_confined(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if info.field_name == "planner_kwargs":
            check_planner_model(value)
        return confined_kwargs(value, str(info.field_name))

    @field_validator("policy")
    @classmethod
    def _policy_kind_is_registered(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        kinds = registry.names("driver")
        if value.get("kind") not in kinds:
            raise ValueError(
                f"policy.kind must be one of {', '.join(kinds)}, got {value.get('kind')!r}"
            )
        from llmrl.agents.policy_spec import parse_policy_spec, spec_dict

        # checked as its driver will read it: every key, and saved artifacts only (a file the
        # project did not save is refused here; `run:<id>/...` becomes its path)
        return spec_dict(parse_policy_spec(value))

    @model_validator(mode="after")
    def _env_kwargs_are_accepted(self) -> EvaluateConfig:
        from llmrl.simulator.world import check_env_kwargs

        try:
            check_env_kwargs(self.env, self.env_kwargs)
        except ValueError as exc:  # WorldError names the kwarg and the accepted ones
            raise ValueError(f"env_kwargs.{exc}") from None
        return self

    @model_validator(mode="after")
    def _env_gives_what_the_planner_reads(self) -> EvaluateConfig:
        """A planner that reads a privileged entry (the oracle's plan, the feasible skills)
        needs an env that gives it: refused here, naming the planners that would play it,
        rather than failing at the first step of the run."""
        if self.policy is not None:
            return self
        from llmrl.simulator.world import PRIVILEGED_OBSERVATIONS, make_env

        needed = [
            name
            for name in getattr(registry.get("planner", self.planner), "observations", ())
            if name in PRIVILEGED_OBSERVATIONS
        ]
        if not needed:
            return self
        try:
            env = make_env(self.env, **self.env_kwargs)
        except Exception:  # an env that cannot be built here fails with its own error at run time
            return self
        try:
            given = set(env.observation_space.spaces)
        finally:
            env.close()
        missing = [name for name in needed if name not in given]
        if missing:
            usable = [
                name
                for name in registry.names("planner")
                if set(getattr(registry.get("planner", name), "observations", ())) <= given
            ]
            raise ValueError(
                f"planner: {self.planner!r} reads the env's {', '.join(missing)}, which "
                f"{self.env!r} does not give{' with these env_kwargs' if self.env_kwargs else ''};"
                f" planners that read only what it gives: {', '.join(usable) or '(none)'}, or "
                "play a trained policy with policy={kind: ...}"
            )
        return self

    def policy_spec(self) -> dict[str, Any]:
        if self.policy is not None:
            return self.policy
        return {"kind": "planner", "name": self.planner, "kwargs": self.planner_kwargs}

    def policy_label(self) -> str:
        spec = self.policy_spec()
        return str(spec.get("name") or spec["kind"])


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


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(records: list[EpisodeRecord]) -> dict[str, Any]:
    n = len(records)
    returns = np.array([r.episode_return for r in records], dtype=float)
    lengths = np.array([r.length for r in records], dtype=float)
    successes = sum(r.success for r in records)
    low, high = wilson_interval(successes, n)
    calls = sum(len(r.llm_calls) for r in records)
    tokens = sum(c.prompt_tokens + c.completion_tokens for r in records for c in r.llm_calls)
    cost = sum(c.cost_usd for r in records for c in r.llm_calls)
    per = (lambda x: x / n) if n else (lambda x: math.nan)
    return {
        "episodes": n,
        "success_rate": per(successes),
        "success_ci95": f"[{low:.2f}, {high:.2f}]",
        "mean_return": float(returns.mean()) if n else math.nan,
        "std_return": float(returns.std()) if n else math.nan,
        "mean_length": float(lengths.mean()) if n else math.nan,
        "llm_calls_per_episode": per(calls),
        "tokens_per_episode": per(tokens),
        "cost_per_episode_usd": per(cost),
    }


def plot_episodes(records: list[EpisodeRecord], path: Any, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    index = np.arange(len(records))
    returns = [r.episode_return for r in records]
    colors = ["tab:green" if r.success else "tab:red" for r in records]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.bar(index, returns, color=colors)
    left.set_xlabel("episode")
    left.set_ylabel("return")
    left.set_title("return per episode (green: success)")
    right.hist([r.length for r in records], bins=min(20, max(len(records), 1)), color="tab:blue")
    right.set_xlabel("episode length (steps)")
    right.set_ylabel("episodes")
    right.set_title("episode lengths")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
