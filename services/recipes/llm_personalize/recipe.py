"""`llm-personalize`: align an LLM planner with a household's preferences (Han et al. 2024).

Per run, on the Housekeep simulator (real scenes from `data_dir`, else procedural houses):

    evaluate/zero-shot   the base model plans (greedy) on every evaluation episode
    demonstrate          the demonstrator plays the training episodes; its plans are logged
                         as the queries the LLM planner would have made
    annotate/0           annotator: bootstrapping SFT data (OpenAI chat JSONL + statistics)
    train/0              LoRA SFT -> adapter version 0 ("bootstrap")
    evaluate/0
    for k in 1..rounds:  self-training
      collect/k          the current model plans with sampling on the training episodes
      annotate/k         annotator: reward-scored, placement-improving, de-duplicated queries
      train/k            LoRA SFT from version k-1 on round k's data (+ the bootstrap data,
                         `replay_bootstrap`) -> version k
      evaluate/k
    report               per scene and split: success rate per stage; PNG plot per round

Every phase is persisted (outputs in the run store, episodes stored one by one), so a run
interrupted anywhere resumes at the first unfinished phase. Adapters are written where the
gateway finds them (`$LLMRL_HOME/adapters/<model>/<adapter>/<version>`) and served as
`<model>:<adapter>@<version>` without a restart.

Evaluation episodes per scene: "train" = training episodes 0..eval_episodes-1 (the ones
demonstrated and collected on), "held-out" = episodes train_episodes.. (never trained on).

Collection is reproducible: every collected episode's planner gets its own sampling seed
(from the run's `seed`, the round, the scene, the episode and the sample), so collecting again
with the same config gives the same episodes.

`finetune_backend=openai` personalises an OpenAI model instead (`openai_model`): each train
phase is a job on the OpenAI fine-tuning API (the same JSONL data, in one file; round k
continues from round k-1's fine-tune), and every stage is evaluated through the gateway's
`openai` backend under a name derived from the model id (`openai_models`).

    llmrl run llm-personalize rounds=2 train_episodes=10 eval_episodes=5
    llmrl run llm-personalize finetune_backend=openai rounds=1   # needs OPENAI_API_KEY
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from llmrl.common.episodes import EpisodeRecord
from llmrl.common.registry import registry
from llmrl.learner.sft import LLAMA_LINEAR_LAYERS
from llmrl.recipes.base import Phase, Recipe, RecipeConfig, Results, RunContext
from llmrl.recipes.llm_personalize import driver as _driver  # registers the policy kind
from llmrl.recipes.llm_personalize import openai_models
from llmrl.recipes.llm_personalize.report import plot_rounds, stage_rows

ENV = "Housekeep"
PROCEDURAL = "procedural"
SHARED_DATA = Path("../shared/data/housekeep")
HELD_OUT_SEED_OFFSET = 100_000  # procedural houses: held-out houses never meet training ones
ZERO_SHOT = "zero-shot"
# planner seeds stay below 2**31 after the planner's `seed * 1000 + query number`
SAMPLING_SEEDS = 2_000_000


def default_data_dir() -> str | None:
    """$LLMRL_HOUSEKEEP_DATA, else ../shared/data/housekeep if present, else None (procedural)."""
    value = os.environ.get("LLMRL_HOUSEKEEP_DATA")
    if value:
        return value
    return str(SHARED_DATA.resolve()) if (SHARED_DATA / "data.npy").exists() else None


def stage_name(stage: int | str) -> str:
    """ "zero-shot", "bootstrap" (stage 0), "round k"."""
    if stage == ZERO_SHOT:
        return ZERO_SHOT
    return "bootstrap" if int(stage) == 0 else f"round {stage}"


class LlmPersonalizeConfig(RecipeConfig):
    data_dir: str | None = Field(
        default_factory=default_data_dir,
        description="Housekeep data directory ('procedural' or null: generated houses).",
    )
    scenes: list[str] | None = Field(
        None, description="Scenes to personalise to (default: the data's val scenes)."
    )
    train_episodes: int = Field(10, ge=1, description="Training episodes per scene.")
    eval_episodes: int = Field(5, ge=1, description="Evaluation episodes per scene and split.")
    collect_samples: int = Field(
        2, ge=1, description="Sampled episodes per training episode in each self-training round."
    )
    rounds: int = Field(2, ge=0, le=20, description="Self-training rounds (K).")
    model: str = Field(
        "smollm2",
        description="Gateway model to personalise (hf backend; with finetune_backend=openai, "
        "openai_model is personalised instead).",
    )
    planner_mode: Literal["generate", "score"] = Field(
        "generate",
        description="generate: the model writes plans; score: it picks the feasible skill it "
        "scores highest (one step per query, greedy even while collecting).",
    )
    few_shot: bool = Field(True, description="Put the worked example into every prompt.")
    guided: bool | None = Field(
        None,
        description="generate mode: guided decoding keeps plan lines within the skills over "
        "names the agent knows (local models only; null: on unless finetune_backend=openai).",
    )
    guided_max_lines: int = Field(6, ge=1, le=64, description="Guided plans: lines per query.")
    max_steps: int = Field(40, ge=1, description="Skill steps per episode (the env's limit).")
    max_tokens: int = Field(96, ge=8, description="Tokens per planner answer.")
    collect_temperature: float = Field(
        0.7, ge=0, description="Sampling temperature while collecting self-training data."
    )
    demo_plan_length: int = Field(
        6, ge=1, description="Skills per demonstrator plan (the length of the SFT targets)."
    )
    replay_bootstrap: bool = Field(
        True, description="Self-training rounds also train on the bootstrap data."
    )
    sft_steps: int | None = Field(None, ge=1, description="SFT steps (default: sft_epochs).")
    sft_epochs: float = Field(2.0, gt=0, le=100, description="SFT passes over the data.")
    sft_batch_size: int = Field(4, ge=1, le=512, description="SFT batch size.")
    sft_lr: float = Field(2e-4, gt=0, le=1, description="SFT learning rate.")
    lora_r: int = Field(16, ge=1, le=1024, description="LoRA rank.")
    lora_targets: list[str] = Field(
        list(LLAMA_LINEAR_LAYERS), min_length=1, description="Modules that get LoRA weights."
    )
    lora_layers: int | None = Field(
        None,
        ge=1,
        description="LoRA on the top N decoder layers only (null: all; fewer: faster SFT).",
    )
    sft_max_length: int = Field(1536, ge=64, description="SFT examples longer are dropped.")
    sft_bf16: bool | None = Field(
        None, description="bf16 autocast during SFT (null: where bf16 is native)."
    )
    sft_gradient_checkpointing: bool = Field(
        True, description="Recompute activations during SFT backward (much less memory)."
    )
    finetune_backend: Literal["local", "openai"] = Field(
        "local",
        description="local: LoRA SFT of `model`; openai: the OpenAI fine-tuning API on "
        "openai_model (stages evaluated through the gateway's openai backend).",
    )
    openai_model: str = Field(
        "gpt-4o-mini-2024-07-18", min_length=1, description="openai: the base model to tune."
    )
    openai_base_url: str | None = Field(
        default_factory=lambda: os.environ.get("OPENAI_BASE_URL") or None,
        description="openai: API base URL (default $OPENAI_BASE_URL, else api.openai.com).",
    )
    openai_api_key_env: str = Field(
        "OPENAI_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="openai: the environment variable holding the API key (never logged).",
    )
    openai_poll_s: float = Field(
        10.0, gt=0, le=3600, description="openai: seconds between fine-tuning job polls."
    )
    num_envs: int = Field(4, ge=1, le=64, description="Episodes played at once.")
    seed: int = Field(0, ge=0, description="Seed of houses, sampling and SFT.")

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: str | None) -> str | None:
        if value in (None, "", PROCEDURAL, "none", "null"):
            return None
        from llmrl.simulator.envs.housekeep.data import check_data_dir

        try:
            return str(check_data_dir(value))
        except FileNotFoundError as exc:  # a config error, named by pydantic as data_dir
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _scenes(self) -> LlmPersonalizeConfig:
        if self.data_dir is None:
            if self.scenes not in (None, [PROCEDURAL]):
                raise ValueError("scenes: procedural houses have no scenes (set data_dir)")
            return self
        from llmrl.simulator.envs.housekeep.data import available_scenes, split_scenes

        if self.scenes is None:  # the val scenes (scene_list): a config error if there are none
            try:
                split_scenes(self.data_dir, "val")
            except ValueError as exc:
                raise ValueError(f"scenes: unset, and {exc}; name the scenes to use") from None
            return self
        scenes = available_scenes(self.data_dir)
        unknown = [s for s in self.scenes if s not in scenes]
        if unknown:
            raise ValueError(f"scenes: unknown {unknown}; scenes in data_dir: {', '.join(scenes)}")
        return self

    @model_validator(mode="after")
    def _openai(self) -> LlmPersonalizeConfig:
        if self.finetune_backend != "openai":
            return self
        if not os.environ.get(self.openai_api_key_env):
            raise ValueError(
                f"openai_api_key_env: finetune_backend=openai reads the OpenAI API key from "
                f"the environment variable {self.openai_api_key_env}, which is unset; set it "
                "(or name another variable in openai_api_key_env)"
            )
        if self.planner_mode != "generate":
            raise ValueError(
                "planner_mode: finetune_backend=openai needs planner_mode=generate "
                "(remote models do not score candidates)"
            )
        if self.guided:
            raise ValueError(
                "guided: remote OpenAI models cannot guide their decoding; leave guided unset "
                "or set guided=false with finetune_backend=openai"
            )
        return self

    @property
    def guided_decoding(self) -> bool:
        """`guided`, its default resolved: on for local models."""
        if self.guided is None:
            return self.finetune_backend == "local"
        return self.guided

    def scene_list(self) -> list[str]:
        if self.data_dir is None:
            return [PROCEDURAL]
        if self.scenes:
            return list(self.scenes)
        from llmrl.simulator.envs.housekeep.data import split_scenes

        return split_scenes(self.data_dir, "val")


@registry.register_recipe(
    "llm-personalize", "LLM-Personalize: bootstrap an LLM planner, then iterative self-training"
)
class LlmPersonalize(Recipe):
    Config = LlmPersonalizeConfig
    config: LlmPersonalizeConfig

    def phases(self) -> list[Phase]:
        phases = [
            Phase(f"evaluate/{ZERO_SHOT}", self._evaluate(ZERO_SHOT), "the base model"),
            Phase("demonstrate", self.demonstrate, "demonstrations on the training episodes"),
            Phase("annotate/0", self._annotate(0), "bootstrap SFT data"),
            Phase("train/0", self._train(0), "LoRA SFT on demonstrations"),
            Phase("evaluate/0", self._evaluate(0), "the bootstrapped model"),
        ]
        for k in range(1, self.config.rounds + 1):
            phases += [
                Phase(f"collect/{k}", self._collect(k), "the current model, sampling"),
                Phase(f"annotate/{k}", self._annotate(k), "self-training selection"),
                Phase(f"train/{k}", self._train(k), "LoRA SFT on the selection"),
                Phase(f"evaluate/{k}", self._evaluate(k), f"round {k}"),
            ]
        phases.append(Phase("report", self.report, "per-round table and plot"))
        return phases

    # -- episodes -------------------------------------------------------------------------
    def _env_kwargs(self, scene: str, episode: int) -> dict[str, Any]:
        cfg = self.config
        if cfg.data_dir is None:
            return {"max_steps": cfg.max_steps}
        return {
            "data_dir": cfg.data_dir,
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
            n_train = min(cfg.eval_episodes, cfg.train_episodes)
            items += [(scene, "train", i) for i in range(n_train)]
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
        return {"kind": _driver.POLICY_KIND, "name": "housekeep-llm", "kwargs": kwargs}

    def model_at(self, ctx: RunContext, stage: int | str) -> str:
        """The gateway model of a stage: the base model, or what train/<stage> made (an
        adapter, or an OpenAI fine-tune the gateway is made to serve)."""
        cfg = self.config
        if cfg.finetune_backend == "openai":
            return openai_models.serve_stage_model(
                ctx.llm, self.openai_model_at(ctx, stage), cfg.openai_base_url,
                cfg.openai_api_key_env,
            )  # fmt: skip
        if stage == ZERO_SHOT:
            return cfg.model
        return str(ctx.phase_outputs(f"train/{stage}")["model"])

    def openai_model_at(self, ctx: RunContext, stage: int | str) -> str:
        """finetune_backend=openai: the OpenAI model id of a stage (base, or a fine-tune)."""
        if stage == ZERO_SHOT:
            return self.config.openai_model
        return str(ctx.phase_outputs(f"train/{stage}")["fine_tuned_model"])

    def _evaluate(self, stage: int | str):
        def run(ctx: RunContext) -> dict[str, Any]:
            phase = f"evaluate/{stage}"
            model = self.model_at(ctx, stage)
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
    ) -> list[Any]:
        """Jobs on the training episodes; `policy_for(scene, episode, sample)` is each one's
        policy (collection seeds every episode's sampling on its own)."""
        cfg = self.config
        jobs = []
        for scene in cfg.scene_list():
            for episode in range(cfg.train_episodes):
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
            "kind": _driver.POLICY_KIND,
            "name": "housekeep-demonstrator",
            "kwargs": {"max_plan_length": cfg.demo_plan_length},
            "few_shot": cfg.few_shot,
        }
        jobs = self._training_jobs(ctx, "demonstrate", lambda *_: policy, samples=1)
        records = ctx.run_episodes("demonstrate", jobs, parallel=cfg.num_envs)
        return summarize(records)

    def _collect(self, k: int):
        def run(ctx: RunContext) -> dict[str, Any]:
            cfg = self.config
            model = self.model_at(ctx, k - 1)
            phase = f"collect/{k}"

            def policy_for(scene: str, episode: int, sample: int) -> dict[str, Any]:
                seed = self.sampling_seed(k, scene, episode, sample)
                return self._llm_policy(model, cfg.collect_temperature, seed=seed)

            jobs = self._training_jobs(ctx, phase, policy_for, samples=cfg.collect_samples)
            records = ctx.run_episodes(phase, jobs, parallel=cfg.num_envs)
            return {"model": model, **summarize(records)}

        return run

    # -- data and training ------------------------------------------------------------------
    def _annotate(self, k: int):
        def run(ctx: RunContext) -> dict[str, Any]:
            from llmrl.annotator.datasets import (
                build_bootstrap_dataset,
                build_self_training_dataset,
            )

            out = ctx.out_dir / "datasets"
            if k == 0:
                records = ctx.store.episodes(ctx.run_id, phase="demonstrate")
                built = build_bootstrap_dataset(records, out, "bootstrap")
            else:
                records = ctx.store.episodes(ctx.run_id, phase=f"collect/{k}")
                built = build_self_training_dataset(records, out, f"round-{k}")
            ctx.add_artifact(f"datasets/{Path(built['data']).name}", built["data"], "dataset")
            stats = built["stats_data"]
            return {"data": built["data"], "examples": stats["examples"], "stats": stats}

        return run

    def adapter_name(self, ctx: RunContext) -> str:
        return "personalize-" + re.sub(r"[^A-Za-z0-9_-]", "-", ctx.run_id)

    def _train(self, k: int):
        def run(ctx: RunContext) -> dict[str, Any]:
            cfg = self.config
            data = [ctx.phase_outputs(f"annotate/{k}")]
            if k > 0 and cfg.replay_bootstrap:
                data.append(ctx.phase_outputs("annotate/0"))
            files = [d["data"] for d in data if d["examples"] > 0]
            previous = None if k == 0 else ctx.phase_outputs(f"train/{k - 1}")
            if not files:  # nothing selected: this round keeps the previous model
                skipped = {"skipped": "no training examples", "examples": 0}
                if cfg.finetune_backend == "openai":
                    tuned = (previous or {}).get("fine_tuned_model") or cfg.openai_model
                    model = openai_models.gateway_name(tuned)
                    return {"model": model, "fine_tuned_model": tuned, **skipped}
                # the previous adapter, which round k + 1 continues from
                kept = {
                    key: value
                    for key, value in (previous or {}).items()
                    if key in ("model", "adapter_dir")
                }
                return {"model": cfg.model, **kept, **skipped}
            if cfg.finetune_backend == "openai":
                return self._train_openai(ctx, k, files, previous)
            return self._train_local(ctx, k, files, previous)

        return run

    def _run_finetune(
        self, ctx: RunContext, request: Any, on_step: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """Embedded mode trains here; service mode on the learner service (same function)."""
        from llmrl.learner.client import run_learner_job
        from llmrl.learner.jobs import run_finetune

        if ctx.simulator is None:
            return run_finetune(request, report=on_step)
        return run_learner_job("/jobs", request.model_dump(), on_progress=on_step)

    def _train_local(
        self, ctx: RunContext, k: int, files: list[str], previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        from llmrl.learner.jobs import FineTuneRequest

        cfg = self.config
        request = FineTuneRequest(
            backend="local",
            data=files,
            model=cfg.model,
            adapter=self.adapter_name(ctx),
            version=str(k),
            init_adapter=(previous or {}).get("adapter_dir"),
            steps=cfg.sft_steps,
            epochs=cfg.sft_epochs,
            batch_size=cfg.sft_batch_size,
            learning_rate=cfg.sft_lr,
            lora_r=cfg.lora_r,
            lora_targets=list(cfg.lora_targets),
            lora_layers=cfg.lora_layers,
            max_length=cfg.sft_max_length,
            bf16=cfg.sft_bf16,
            gradient_checkpointing=cfg.sft_gradient_checkpointing,
            seed=cfg.seed + k,
        )
        # a progress bar in SFT steps (examples dropped as too long can make it end early)
        ctx.progress.start(f"train/{k}", sft_steps(files, request), unit="steps")
        try:
            result = self._run_finetune(ctx, request, on_step=ctx.progress.advance)
        finally:
            ctx.progress.finish()
        writer = ctx.tensorboard
        if writer is not None:
            for step, loss in enumerate(result["losses"]):
                writer.add_scalar(f"losses/sft_round_{k}", loss, step)
        keys = ("adapter_dir", "examples", "dropped_too_long", "steps", "first_loss")
        return {
            "model": result["model"],
            **{key: result[key] for key in keys},
            "last_loss": result["last_loss"],
            "seconds": round(result["seconds"], 1),
        }

    def _train_openai(
        self, ctx: RunContext, k: int, files: list[str], previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        """A job on the OpenAI fine-tuning API (one training file: the round's files joined);
        round k continues from round k-1's fine-tune."""
        from llmrl.learner.jobs import FineTuneRequest

        cfg = self.config
        data = ctx.out_dir / "datasets" / f"openai-train-{k}.jsonl"
        texts = [Path(path).read_text() for path in files]
        joined = "".join(t if t.endswith("\n") else t + "\n" for t in texts if t)
        data.write_text(joined)
        examples = sum(1 for line in joined.splitlines() if line.strip())
        base = (previous or {}).get("fine_tuned_model") or cfg.openai_model
        request = FineTuneRequest(
            backend="openai",
            data=[str(data)],
            model=base,
            suffix=f"lp-{k}",
            steps=cfg.sft_steps,  # set: the API picks the epochs (it counts no steps)
            epochs=cfg.sft_epochs,
            seed=cfg.seed + k,
            base_url=cfg.openai_base_url,
            api_key_env=cfg.openai_api_key_env,
            poll_interval_s=cfg.openai_poll_s,
        )
        result = self._run_finetune(ctx, request)
        job = result["openai_job"]
        return {
            "model": openai_models.gateway_name(result["fine_tuned_model"]),
            "fine_tuned_model": result["fine_tuned_model"],
            "base_model": base,
            "examples": examples,
            "openai_job_id": job["job_id"],
            "trained_tokens": job.get("trained_tokens"),
            "seconds": round(job["seconds"], 1),
        }

    # -- report -----------------------------------------------------------------------------
    def stages(self) -> list[int | str]:
        return [ZERO_SHOT, *range(self.config.rounds + 1)]

    def base_model(self) -> str:
        """The model being personalised (a gateway model, or an OpenAI model id)."""
        cfg = self.config
        return cfg.openai_model if cfg.finetune_backend == "openai" else cfg.model

    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        stages = self.stages()
        evaluations = {stage_name(s): ctx.phase_outputs(f"evaluate/{s}") for s in stages}
        rows = stage_rows(evaluations)
        plot = "llm_personalize.png"
        plot_rounds(rows, list(evaluations), ctx.plot_path(plot))
        notes = [
            "success rate (%) = (correctly placed at the end - at the start) / misplaced at "
            "the start x 100, mean over episodes (can be negative); greedy decoding",
            f"model {self.base_model()}; train = training episodes "
            f"0..{cfg.eval_episodes - 1} of each scene, held-out = episodes {cfg.train_episodes}.."
            f"{cfg.train_episodes + cfg.eval_episodes - 1}",
        ]
        for k in range(self.config.rounds + 1):
            data = ctx.phase_outputs(f"annotate/{k}")
            train = ctx.phase_outputs(f"train/{k}")
            if "steps" in train:
                loss = (
                    f"loss {train['first_loss']:.3f} -> {train['last_loss']:.3f} in "
                    f"{train['steps']} steps ({train['seconds']} s)"
                )
            elif "openai_job_id" in train:
                loss = (
                    f"OpenAI job {train['openai_job_id']} -> {train['fine_tuned_model']} "
                    f"({train['trained_tokens']} tokens, {train['seconds']} s)"
                )
            else:
                loss = train.get("skipped", "")
            notes.append(f"{stage_name(k)}: {data['examples']} SFT examples; {loss}")
        results = Results(
            title=f"llm-personalize: {self.base_model()} on Housekeep",
            rows=rows,
            columns=["scene", "episodes", *evaluations],
            notes=notes,
            plots=[plot],
        )
        ctx.write_results(results)
        return {"results": "results.json", "rows": rows}


# -- figures ----------------------------------------------------------------------------------
def sft_steps(files: list[str], request: Any) -> int:
    """The optimiser steps a local fine-tuning request will take (as `train_lora_sft` counts;
    examples it drops as too long can end it earlier)."""
    from llmrl.learner.sft import optimizer_steps

    examples = 0
    if not request.steps:
        for path in files:
            with open(path, encoding="utf-8") as handle:
                examples += sum(1 for line in handle if line.strip())
    return optimizer_steps(examples, request.batch_size, request.epochs, request.steps)


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
