"""`kalm`: offline RL on LLM-imagined rollouts (Pang et al., NeurIPS 2024).

Phases (each resumable; a completed one is never run again):
  data                       the real data: scripted collection and/or KALM's released data
                             (or `dataset=` an OfflineDataset file), saved as `data/real.npz`,
                             with the instructions' sentence embeddings (gateway `embed`)
  ground                     grounding SFT of the LLM on the real data (`kalm-grounding`)
  imagine/<level>            rollouts the grounded LLM imagines for the level's instructions
                             from real initial states (CLEVR-Robot, Meta-World); filtered by
                             `imagined_filter` (valid states / also goal met); kept shares
                             under both and goal-match rate; `imagined/<level>.npz`
  offline/<alg>/<data>/<s>   an offline RL policy (d3rlpy) on `real` or `real+imagined` data
  evaluate/<alg>/<data>/<s>/<level>   its episodes in the env on the level's goals
  report                     results table (algorithm x level x data), PNGs, paper figures

In service mode the two training kinds run on the learner (policy jobs `kalm-grounding`,
`kalm-offline`) and the evaluation episodes on the rollout workers. Imagination and
Meta-World details: see `imagination.py` and the README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.context import RunContext
from llmrl.recipes.kalm import driver  # also registers the driver
from llmrl.recipes.kalm.config import KalmConfig, discrete_action_size
from llmrl.recipes.kalm.report import kalm_results, kalm_targets, plot_results
from llmrl.recipes.kalm.training import (
    KalmGroundingJob,
    KalmOfflineJob,
    load_datasets,
    train_grounding,
    train_offline,
)
from llmrl.recipes.progress import tracked
from llmrl.recipes.summary import summarize
from llmrl.recipes.targets import ConfigResults, Verdict

DATA, GROUND, REPORT = "data", "ground", "report"


STATE_DIMS = {"ClevrRobot": 10, "MetaWorld": 39}


def check_dataset_fits(dataset: Any, env: str, path: str) -> None:
    """A user's dataset must be of `env`'s layout; the error names the file and the field."""
    if dataset.env.split("/")[0] != env:
        raise ValueError(f"dataset: {path}: field 'env' is {dataset.env!r}, not {env!r}")
    width = dataset.observations.shape[1]
    if width != STATE_DIMS[env]:
        raise ValueError(
            f"dataset: {path}: field 'observations' has rows of {width} numbers; {env} states "
            f"have {STATE_DIMS[env]}"
        )
    if dataset.discrete != (env == "ClevrRobot"):
        kind = "discrete ids" if env == "ClevrRobot" else "continuous vectors"
        raise ValueError(f"dataset: {path}: field 'actions' must hold {kind} for {env}")


def offline_phase(algorithm: str, variant: str, seed: int) -> str:
    return f"offline/{algorithm}/{variant}/{seed}"


def evaluation_phase(algorithm: str, variant: str, seed: int, level: str) -> str:
    return f"evaluate/{algorithm}/{variant}/{seed}/{level}"


@registry.register_recipe(
    "kalm", "KALM: grounded-LLM imagined rollouts + offline RL (CLEVR-Robot, Meta-World)"
)
class Kalm(Recipe):
    Config = KalmConfig
    config: KalmConfig
    headline_metrics = ("success_rate",)

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        return kalm_targets(results)

    # -- the plan -------------------------------------------------------------------------
    @property
    def imagines(self) -> bool:
        return "real+imagined" in self.config.variants and bool(self.config.imagine_levels)

    def seeds(self) -> list[int]:
        return [self.config.seed + i for i in range(self.config.offline_seeds)]

    def phases(self) -> list[Phase]:
        cfg = self.config
        phases = [Phase(DATA, self.data, "real data and instruction embeddings")]
        if self.imagines:
            phases.append(Phase(GROUND, self.ground, "grounding SFT of the LLM"))
            for level in cfg.imagine_levels:
                phases.append(
                    Phase(f"imagine/{level}", lambda ctx, lv=level: self.imagine(ctx, lv))
                )
        for variant in cfg.variants:
            for algorithm in cfg.algorithms:
                for seed in self.seeds():
                    phases.append(
                        Phase(
                            offline_phase(algorithm, variant, seed),
                            lambda ctx, a=algorithm, v=variant, s=seed: self.offline(ctx, a, v, s),
                            f"{algorithm} on {variant} data (seed {seed})",
                        )
                    )
                    for level in cfg.levels:
                        phases.append(
                            Phase(
                                evaluation_phase(algorithm, variant, seed, level),
                                lambda ctx, a=algorithm, v=variant, s=seed, lv=level: self.evaluate(
                                    ctx, a, v, s, lv
                                ),
                                f"{algorithm}/{variant} on {level} goals",
                            )
                        )
        phases.append(Phase(REPORT, self.report, "results table"))
        return phases

    # -- data -------------------------------------------------------------------------------
    def embed(self, ctx: RunContext, texts: list[str], path: Path) -> str:
        """Save the sentence embeddings of `texts` (one row each) as a plain .npy."""
        unique = sorted(set(texts))
        vectors = ctx.llm.embed(
            unique, model=self.config.embed_model, run_id=ctx.run_id, tag="kalm"
        )
        index = {text: i for i, text in enumerate(unique)}
        rows = np.asarray(vectors, np.float32)[[index[t] for t in texts]]
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, rows, allow_pickle=False)
        return str(path)

    def real_data(self, ctx: RunContext) -> Any:
        """Scripted episodes (k1's collectors) and/or KALM's released data, concatenated."""
        from llmrl.common.offline_dataset import OfflineDataset
        from llmrl.recipes.kalm import collect

        cfg = self.config
        parts = []
        if "scripted" in cfg.data:
            with tracked(ctx.progress, DATA, cfg.scripted_episodes):
                if cfg.env == "ClevrRobot":
                    done = [0]

                    def advance(finished: int) -> None:
                        ctx.progress.advance(finished - done[0])
                        done[0] = finished

                    parts.append(
                        collect.collect_clevr(
                            cfg.scripted_episodes,
                            noise=cfg.scripted_noise,
                            seed=cfg.seed,
                            goals_per_start=cfg.scripted_goals_per_start,
                            progress=advance,
                        )
                    )
                else:
                    tasks = self.level_tasks("training")
                    per_task = max(1, cfg.scripted_episodes // len(tasks))
                    parts.append(collect.collect_metaworld(tasks, per_task, seed=cfg.seed))
        if "released" in cfg.data:
            from llmrl.recipes.kalm.released import CLEVR_FILE, load_released_clevr, released_file

            parts.append(load_released_clevr(released_file(CLEVR_FILE, cfg.released_path)))
        return parts[0] if len(parts) == 1 else OfflineDataset.concatenate(*parts)

    def level_tasks(self, level: str) -> list[str]:
        """Meta-World's tasks of a level."""
        from llmrl.simulator.envs.metaworld_tasks import TASK_LEVELS

        return list(TASK_LEVELS[level])

    def data(self, ctx: RunContext) -> dict[str, Any]:
        from llmrl.common.offline_dataset import OfflineDataset

        cfg = self.config
        if cfg.dataset is not None:
            dataset = OfflineDataset.load(cfg.dataset)
            check_dataset_fits(dataset, cfg.env, cfg.dataset)
        else:
            dataset = self.real_data(ctx)
        path = dataset.save(ctx.out_dir / "data" / "real.npz")
        embeddings = self.embed(
            ctx,
            [str(t) for t in dataset.instructions],
            ctx.out_dir / "data" / "real_embeddings.npy",
        )
        ctx.add_artifact("data/real.npz", path, kind="dataset")
        return {
            "path": str(path),
            "embeddings": embeddings,
            "episodes": dataset.num_episodes,
            "transitions": len(dataset),
            "terminal_share": float(dataset.terminals.sum() / max(dataset.num_episodes, 1)),
        }

    # -- grounding and imagination ------------------------------------------------------------
    def ground(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        if cfg.grounding_from is not None:  # checked against this config when it was read
            from llmrl.learner.versions import Checkpoint

            reused = Checkpoint.read(cfg.grounding_from)
            episodes = ctx.phase_outputs(DATA)["episodes"]
            if reused.result.get("episodes") not in (None, episodes):
                raise ValueError(
                    f"grounding_from: {cfg.grounding_from!r} was grounded on "
                    f"{reused.result['episodes']} episodes, this run's data has {episodes}; "
                    "reuse a grounding of the same data (same data, scripted_episodes, seed)"
                )
            return {"checkpoint": str(reused.path), **reused.result, "reused": True}
        job = KalmGroundingJob(
            datasets=[ctx.phase_outputs(DATA)["path"]],
            model_path=str(ctx.out_dir / "grounding"),
            base_model=cfg.model,
            steps=cfg.grounding_steps,
            batch_size=cfg.grounding_batch_size,
            learning_rate=cfg.grounding_learning_rate,
            lora_r=cfg.lora_r,
            lora_layers=cfg.lora_layers,
            base_layers=cfg.grounding_layers,
            numbers=cfg.numbers,
            state_target=cfg.state_target,
            action_size=discrete_action_size(cfg.env),
            state_loss_weight=cfg.grounding_state_weight,
            action_loss_weight=cfg.grounding_action_weight,
            tasks=cfg.grounding_tasks,
            seed=cfg.seed,
            tensorboard_dir=str(ctx.out_dir / "tb" / "grounding"),
        )
        return self.run_job(ctx, GROUND, job, job.steps, train_grounding, unit="steps")

    def imagine(self, ctx: RunContext, level: str) -> dict[str, Any]:
        from llmrl.recipes.kalm.imagination import imagination_env, imagine_level

        cfg = self.config
        real = load_datasets([ctx.phase_outputs(DATA)["path"]])
        from llmrl.learner.algorithms import load_cached

        # loaded once for every level's phase (kept by path and modification time)
        grounded = load_cached("kalm-grounding", ctx.phase_outputs(GROUND)["checkpoint"])
        env = imagination_env(cfg.env, real)
        phase = f"imagine/{level}"
        try:
            with tracked(ctx.progress, phase, cfg.imagined_per_level, unit="rollouts"):
                dataset, figures = imagine_level(
                    grounded,
                    real,
                    env,
                    level,
                    count=cfg.imagined_per_level,
                    max_steps=cfg.imagine_max_steps,
                    seed=cfg.seed,
                    imagined_filter=cfg.imagined_filter,
                    on_progress=ctx.progress.advance,
                    temperature=cfg.imagine_temperature,
                )
        finally:
            getattr(env, "close", lambda: None)()
        outputs: dict[str, Any] = {"level": level, **figures, "path": None, "embeddings": None}
        if dataset is not None:
            path = dataset.save(ctx.out_dir / "imagined" / f"{level}.npz")
            outputs["path"] = str(path)
            outputs["embeddings"] = self.embed(
                ctx,
                [str(t) for t in dataset.instructions],
                ctx.out_dir / "imagined" / f"{level}_embeddings.npy",
            )
        return outputs

    # -- offline RL -------------------------------------------------------------------------
    def offline(self, ctx: RunContext, algorithm: str, variant: str, seed: int) -> dict[str, Any]:
        cfg = self.config
        data = ctx.phase_outputs(DATA)
        paths, embeddings = [data["path"]], [data["embeddings"]]
        if variant == "real+imagined":
            for level in cfg.imagine_levels:
                imagined = ctx.phase_outputs(f"imagine/{level}")
                if imagined["path"] is not None:
                    paths += [imagined["path"]] * cfg.imagined_weight
                    embeddings += [imagined["embeddings"]] * cfg.imagined_weight
        name = f"{algorithm}-{variant.replace('+', '-')}-{seed}"
        joined = ctx.out_dir / "offline" / f"{name}_embeddings.npy"
        joined.parent.mkdir(parents=True, exist_ok=True)
        rows = np.concatenate([np.load(p, allow_pickle=False) for p in embeddings])
        np.save(joined, rows, allow_pickle=False)
        job = KalmOfflineJob(
            algorithm=algorithm,
            datasets=paths,
            embeddings=str(joined),
            model_path=str(ctx.out_dir / "policies" / name),
            steps=cfg.offline_steps,
            batch_size=cfg.offline_batch_size,
            action_size=discrete_action_size(cfg.env),
            seed=seed,
            tensorboard_dir=str(ctx.out_dir / "tb" / name),
        )
        phase = offline_phase(algorithm, variant, seed)
        result = self.run_job(ctx, phase, job, job.steps, train_offline, unit="steps")
        return {**result, "variant": variant, "seed": seed, "datasets": len(paths)}

    def run_job(
        self, ctx: RunContext, phase: str, job: Any, total: int, run: Any, unit: str
    ) -> dict[str, Any]:
        """In this process, or on the learner service where one is configured."""
        return ctx.train(job, run, phase, total, unit=unit)

    # -- evaluation -------------------------------------------------------------------------
    def evaluate(
        self, ctx: RunContext, algorithm: str, variant: str, seed: int, level: str
    ) -> dict[str, Any]:
        cfg = self.config
        trained = ctx.phase_outputs(offline_phase(algorithm, variant, seed))
        policy = {
            "kind": driver.OFFLINE,
            "algorithm": algorithm,
            "checkpoint": trained["checkpoint"],
            "embed_model": cfg.embed_model,
        }
        phase = evaluation_phase(algorithm, variant, seed, level)
        if cfg.eval_mode == "world":
            figures = self.evaluate_in_worlds(ctx, phase, policy, level)
        else:
            jobs = [
                ctx.episode_job(
                    phase,
                    i,
                    env=cfg.env,
                    seed=cfg.seed + cfg.eval_seed_offset + i,  # the same for every policy
                    policy=policy,
                    env_kwargs=self.eval_settings(level, i),
                )
                for i in range(cfg.eval_episodes)
            ]
            figures = summarize(ctx.run_episodes(phase, jobs))
        return {
            "algorithm": algorithm,
            "data": variant,
            "seed": seed,
            "level": level,
            **figures,
        }

    def evaluate_in_worlds(
        self, ctx: RunContext, phase: str, policy: dict[str, Any], level: str
    ) -> dict[str, Any]:
        """Every episode of the level at once: one world per env setting (`evaluation.py`)."""
        from llmrl.learner.algorithms import load_cached
        from llmrl.recipes.kalm.evaluation import play_world, summarize_batch

        cfg = self.config
        model = load_cached(policy["algorithm"], policy["checkpoint"])
        groups: dict[str, tuple[dict[str, Any], int]] = {}
        for i in range(cfg.eval_episodes):
            settings = self.eval_settings(level, i)
            key = repr(sorted(settings.items()))
            groups[key] = (settings, groups.get(key, (settings, 0))[1] + 1)

        def embed(texts: list[str]) -> np.ndarray:
            return ctx.llm.embed(texts, model=cfg.embed_model, run_id=ctx.run_id, tag="kalm-policy")

        results = []
        with tracked(ctx.progress, phase, cfg.eval_episodes):
            for settings, count in groups.values():
                with ctx.make_world(cfg.env, num_envs=count, **settings) as world:
                    results.append(
                        play_world(world, model, embed, seed=cfg.seed + cfg.eval_seed_offset)
                    )
                ctx.progress.advance(count)
        return summarize_batch(results)

    def eval_settings(self, level: str, episode: int) -> dict[str, Any]:
        """The env settings of evaluation episode `episode` on `level`: CLEVR-Robot's level
        (a random goal of it per episode), or Meta-World's tasks of the level in turn."""
        if self.config.env == "ClevrRobot":
            return {"level": level}
        tasks = self.level_tasks(level)
        return {"task": tasks[episode % len(tasks)]}

    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        evaluations = [
            ctx.phase_outputs(p.name) for p in self.phases() if p.name.startswith("evaluate/")
        ]
        imagined = (
            [ctx.phase_outputs(f"imagine/{level}") for level in cfg.imagine_levels]
            if self.imagines
            else []
        )
        grounding = ctx.phase_outputs(GROUND) if self.imagines else None
        plots = plot_results(evaluations, imagined, ctx.out_dir)
        results = kalm_results(cfg, evaluations, imagined, grounding, plots)
        ctx.write_results(results)
        ctx.set_summary(
            **{
                f"{row['algorithm']}/{row['data']}/{row['level']}": row["success_rate"]
                for row in results.rows
                if "algorithm" in row
            }
        )
        return {"rows": len(results.rows)}
