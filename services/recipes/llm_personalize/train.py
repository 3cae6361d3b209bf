"""The train phases: LoRA SFT of the planner on each round's data, or an OpenAI fine-tune.

train/0 fine-tunes the base model on the bootstrap data; train/k continues from stage k-1's
adapter on round k's selection, replaying the selections of rounds 1..k-1 (`replay_rounds`)
and the bootstrap data (`replay_bootstrap`; all of it, or a seeded subset of
`replay_bootstrap_examples`), so that a round adds to what the earlier ones taught rather than
overwriting it. A round without any example keeps the previous model.
Embedded runs train in-process; service runs on the learner service (the same function).
`stage_model` is the gateway model a stage plays with.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmrl.common.providers import provider, provider_named_by
from llmrl.recipes.context import RunContext
from llmrl.recipes.llm_personalize import openai_models
from llmrl.recipes.llm_personalize.annotate import add_dataset_artifact
from llmrl.recipes.llm_personalize.config import ZERO_SHOT, LlmPersonalizeConfig


def stage_model(config: LlmPersonalizeConfig, ctx: RunContext, stage: int | str) -> str:
    """The gateway model of a stage: the base model, or what train/<stage> made (an adapter,
    or an OpenAI fine-tune the gateway is made to serve)."""
    if config.finetune_backend == "openai":
        chosen = provider(openai_provider(config))  # only configured endpoints are served
        return openai_models.serve_stage_model(
            ctx.llm, openai_stage_model(config, ctx, stage), chosen.base_url, chosen.api_key_env
        )
    if stage == ZERO_SHOT:
        return config.model
    return str(ctx.phase_outputs(f"train/{stage}")["model"])


def openai_provider(config: LlmPersonalizeConfig) -> str:
    """The configured provider (llmrl.common.providers) that the documented keys
    `openai_base_url` and `openai_api_key_env` name: a run config never brings its own
    endpoint, it picks one the operator configured."""
    return provider_named_by(config.openai_base_url, config.openai_api_key_env, "openai_base_url")


def openai_stage_model(config: LlmPersonalizeConfig, ctx: RunContext, stage: int | str) -> str:
    """finetune_backend=openai: the OpenAI model id of a stage (base, or a fine-tune)."""
    if stage == ZERO_SHOT:
        return config.openai_model
    return str(ctx.phase_outputs(f"train/{stage}")["fine_tuned_model"])


def replay_subset(source: str, limit: int, seed: int, dest: Path) -> dict[str, Any]:
    """At most `limit` examples (lines) of a JSONL dataset, a seeded random subset kept in
    the source's order, written to `dest`; the source itself when it holds no more."""
    lines = [line for line in Path(source).read_text().splitlines() if line.strip()]
    if len(lines) <= limit:
        return {"data": source, "examples": len(lines)}
    kept = sorted(random.Random(seed).sample(range(len(lines)), limit))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(lines[i] + "\n" for i in kept))
    return {"data": str(dest), "examples": limit}


def finetune_here(request: Any, on_progress: Callable[[int], None] | None = None) -> dict:
    """A fine-tuning job in this process (the learner service runs the same function)."""
    from llmrl.learner.jobs import run_finetune

    return run_finetune(request, report=on_progress)


class TrainPhases:
    """The recipe's train/<k> phases (mixed into `LlmPersonalize`)."""

    config: LlmPersonalizeConfig

    def adapter_name(self, ctx: RunContext) -> str:
        return "personalize-" + re.sub(r"[^A-Za-z0-9_-]", "-", ctx.run_id)

    def _train(self, k: int):
        def run(ctx: RunContext) -> dict[str, Any]:
            cfg = self.config
            data = [ctx.phase_outputs(f"annotate/{k}")]
            if k > 0 and cfg.replay_rounds:
                data += [ctx.phase_outputs(f"annotate/{j}") for j in range(1, k)]
            if k > 0 and cfg.replay_bootstrap:
                bootstrap = ctx.phase_outputs("annotate/0")
                if cfg.replay_bootstrap_examples is not None and bootstrap["examples"] > 0:
                    bootstrap = replay_subset(
                        bootstrap["data"],
                        cfg.replay_bootstrap_examples,
                        seed=cfg.seed + k,
                        dest=ctx.out_dir / "datasets" / f"bootstrap-replay-{k}.jsonl",
                    )
                    add_dataset_artifact(ctx, bootstrap["data"])
                data.append(bootstrap)
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
            learning_rate=cfg.round_learning_rate(k),
            lora_r=cfg.lora_r,
            lora_targets=list(cfg.lora_targets),
            lora_layers=cfg.lora_layers,
            max_length=cfg.sft_max_length,
            bf16=cfg.sft_bf16,
            gradient_checkpointing=cfg.sft_gradient_checkpointing,
            seed=cfg.seed + k,
        )
        # a progress bar in SFT steps (examples dropped as too long can make it end early)
        total = sft_steps(files, request)
        result = ctx.train(request, finetune_here, f"train/{k}", total, endpoint="/jobs")
        writer = ctx.tensorboard
        if writer is not None:
            for step, loss in enumerate(result["losses"]):
                writer.add_scalar(f"losses/sft_round_{k}", loss, step)
        keys = ("adapter_dir", "examples", "dropped_too_long", "steps", "first_loss")
        return {
            "model": result["model"],
            **{key: result[key] for key in keys},
            "last_loss": result["last_loss"],
            "learning_rate": request.learning_rate,
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
            provider=openai_provider(cfg),
            poll_interval_s=cfg.openai_poll_s,
        )
        result = ctx.train(request, finetune_here, f"train/{k}", 1, unit="jobs", endpoint="/jobs")
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


def sft_steps(files: list[str], request: Any) -> int:
    """The optimiser steps a local fine-tuning request will take (as `train_lora_sft` counts;
    examples it drops as too long can end it earlier)."""
    from llmrl.learner.algorithms.sft import optimizer_steps

    examples = 0
    if not request.steps:
        for path in files:
            with open(path, encoding="utf-8") as handle:
                examples += sum(1 for line in handle if line.strip())
    return optimizer_steps(examples, request.batch_size, request.epochs, request.steps)
