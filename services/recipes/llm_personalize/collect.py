"""The phases that play episodes: evaluate/<stage>, demonstrate and collect/<k>.

Which episodes a run plays (the evaluation set, the training episodes), with which seeds, and
under which policy: the LLM planner of a stage (`housekeep-planner` kind; sampling with its own
seed per collected episode), or the demonstrator. `summarize` gives the figures of the
episodes a phase played.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from llmrl.common.episodes import EpisodeRecord
from llmrl.recipes.context import RunContext
from llmrl.recipes.llm_personalize.config import (
    ENV,
    HELD_OUT_SEED_OFFSET,
    SAMPLING_SEEDS,
    LlmPersonalizeConfig,
    stage_name,
)
from llmrl.recipes.llm_personalize.driver import POLICY_KIND
from llmrl.recipes.llm_personalize.train import stage_model


class CollectPhases:
    """The recipe's episode-playing phases (mixed into `LlmPersonalize`)."""

    config: LlmPersonalizeConfig

    def _env_kwargs(self, scene: str, episode: int) -> dict[str, Any]:
        cfg = self.config
        if cfg.data_dir is None:
            return {"max_steps": cfg.max_steps}
        return {
            "data_dir": cfg.data_folder(),
            "scene": scene,
            "episode": episode,
            "max_steps": cfg.max_steps,
        }

    def _seed(self, episode: int, held_out: bool = False, sample: int = 0) -> int:
        """The reset seed; for procedural houses it is what picks the house."""
        base = self.config.seed + episode + (HELD_OUT_SEED_OFFSET if held_out else 0)
        return base + 1_000_000 * sample

    def eval_set(self) -> list[tuple[str, str, int]]:
        """(scene, split, episode index) of every evaluation episode, in job order."""
        cfg = self.config
        items = []
        for scene in cfg.scene_list():
            items += [(scene, "train", i) for i in range(cfg.train_eval_episodes)]
            items += [(scene, "held-out", cfg.train_episodes + i) for i in range(cfg.eval_episodes)]
        return items

    def sampling_seed(self, k: int, scene: str, episode: int, sample: int) -> int:
        """The planner's seed for one collected episode (the planner seeds its i-th query
        with seed * 1000 + i): a hash, so that no two rounds, scenes, episodes or samples
        share their draws, and every rerun of the same config repeats them."""
        key = f"{self.config.seed}|{k}|{scene}|{episode}|{sample}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % SAMPLING_SEEDS

    def _llm_policy(
        self, model: str, temperature: float = 0.0, seed: int | None = None
    ) -> dict[str, Any]:
        # a seeded sample is reproducible (and cached); the local backend samples each batch
        # row from its own seeded generator, so seeded episodes still share forward passes
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": model,
            "mode": cfg.planner_mode,
            "few_shot": cfg.few_shot,
            "max_tokens": cfg.max_tokens,
            "temperature": temperature,
            "guided": cfg.guided_decoding,
            "guided_max_lines": cfg.guided_max_lines,
            "tag": "llm-personalize/planner",
        }
        if seed is not None:
            kwargs["seed"] = seed
        return {"kind": POLICY_KIND, "name": "housekeep-llm", "kwargs": kwargs}

    def _evaluate(self, stage: int | str):
        def run(ctx: RunContext) -> dict[str, Any]:
            phase = f"evaluate/{stage}"
            model = stage_model(self.config, ctx, stage)
            items = self.eval_set()
            jobs = [
                ctx.episode_job(
                    phase,
                    i,
                    env=ENV,
                    seed=self._seed(episode, held_out=split == "held-out"),
                    policy=self._llm_policy(model),
                    env_kwargs=self._env_kwargs(scene, episode),
                )
                for i, (scene, split, episode) in enumerate(items)
            ]
            records = ctx.run_episodes(phase, jobs, parallel=self.config.num_envs)
            groups = summarize_groups(items, records)
            overall = summarize(records)
            ctx.set_summary(**{f"success_rate/{stage_name(stage)}": overall["success_rate"]})
            return {"model": model, "groups": groups, "overall": overall}

        return run

    def _training_jobs(
        self,
        ctx: RunContext,
        phase: str,
        policy_for: Callable[[str, int, int], dict[str, Any]],
        samples: int,
        episodes: int,
    ) -> list[Any]:
        """Jobs on the first `episodes` training episodes of each scene; `policy_for(scene,
        episode, sample)` is each one's policy (collection seeds every episode's sampling on
        its own)."""
        cfg = self.config
        jobs = []
        for scene in cfg.scene_list():
            for episode in range(episodes):
                for sample in range(samples):
                    jobs.append(
                        ctx.episode_job(
                            phase,
                            len(jobs),
                            env=ENV,
                            seed=self._seed(episode, sample=sample),
                            policy=policy_for(scene, episode, sample),
                            env_kwargs=self._env_kwargs(scene, episode),
                        )
                    )
        return jobs

    def demonstrate(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        policy = {
            "kind": POLICY_KIND,
            "name": "housekeep-demonstrator",
            "kwargs": {"max_plan_length": cfg.demo_plan_length},
            "few_shot": cfg.few_shot,
            "query_every_step": cfg.demo_query_every_step,
        }
        jobs = self._training_jobs(
            ctx, "demonstrate", lambda *_: policy, samples=1, episodes=cfg.train_episodes
        )
        records = ctx.run_episodes("demonstrate", jobs, parallel=cfg.num_envs)
        return summarize(records)

    def _collect(self, k: int):
        def run(ctx: RunContext) -> dict[str, Any]:
            cfg = self.config
            model = stage_model(cfg, ctx, k - 1)
            phase = f"collect/{k}"

            def policy_for(scene: str, episode: int, sample: int) -> dict[str, Any]:
                seed = self.sampling_seed(k, scene, episode, sample)
                return self._llm_policy(model, cfg.collect_temperature, seed=seed)

            jobs = self._training_jobs(
                ctx, phase, policy_for, cfg.collect_samples, cfg.collected_episodes
            )
            records = ctx.run_episodes(phase, jobs, parallel=cfg.num_envs)
            return {"model": model, **summarize(records)}

        return run


def summarize(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Mean rearrangement figures of some episodes (success rate in %)."""

    def mean(name: str) -> float:
        values = [r.metrics[name] for r in records if name in r.metrics]
        return float(np.mean(values)) if values else math.nan

    return {
        "episodes": len(records),
        "success_rate": mean("success_rate"),
        "object_success": mean("object_success"),
        "soft_score": mean("soft_score"),
        "all_placed": float(np.mean([r.success for r in records])) if records else math.nan,
        "mean_length": float(np.mean([r.length for r in records])) if records else math.nan,
        "llm_calls_per_episode": float(np.mean([len(r.llm_calls) for r in records]))
        if records
        else math.nan,
    }


def summarize_groups(
    items: list[tuple[str, str, int]], records: list[EpisodeRecord]
) -> dict[str, dict[str, Any]]:
    """Figures per "<scene>|<split>" (records in the order of `items`)."""
    groups: dict[str, list[EpisodeRecord]] = {}
    for (scene, split, _), record in zip(items, records, strict=True):
        groups.setdefault(f"{scene}|{split}", []).append(record)
    return {key: summarize(group) for key, group in groups.items()}
