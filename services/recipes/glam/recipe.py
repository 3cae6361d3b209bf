"""`glam`: PPO on an LLM policy in BabyAI-Text (Carta et al., ICML 2023), with baselines.

Phases: `evaluate/zero-shot` (the base model through the gateway), `train` (llm-ppo
in-process; in service mode the learner's policy job "glam" over the simulator service;
resumable: llm-ppo continues its adapter line), `evaluate/glam` (the trained
adapter served as `<model>:<adapter>@<version>`), `evaluate/random`, then one
`generalise/<method>/<test>` per variant or test mix, and `report` (results table).
`llmrl run glam model=smollm2 train_steps=5120 --out runs/glam`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe, RunContext
from llmrl.recipes.evaluate import summarize
from llmrl.recipes.glam import driver  # also registers the drivers
from llmrl.recipes.glam.config import TEST_MIXES, GlamConfig
from llmrl.recipes.glam.report import glam_results, plot_learning_curve
from llmrl.recipes.glam.training import GlamTrainingJob, train_glam

TRAIN, REPORT = "train", "report"
ADAPTER = "glam"


def evaluation_phase(method: str, test: str = "train") -> str:
    return f"evaluate/{method}" if test == "train" else f"generalise/{method}/{test}"


@registry.register_recipe("glam", "GLAM: PPO on an LLM policy in BabyAI-Text, with baselines")
class Glam(Recipe):
    Config = GlamConfig
    config: GlamConfig
    headline_metrics = ("success_rate", "mean_return", "mean_length")

    def phases(self) -> list[Phase]:
        cfg = self.config
        phases = []
        if "zero-shot" in cfg.methods:
            phases.append(self._evaluation("zero-shot", "train"))
        if "glam" in cfg.methods:
            phases.append(Phase(TRAIN, self.train, "LLM-PPO on the env (llm-ppo)"))
            phases.append(self._evaluation("glam", "train"))
        if "random" in cfg.methods:
            phases.append(self._evaluation("random", "train"))
        for test in cfg.variants:
            phases += [self._evaluation(method, test) for method in cfg.methods]
        phases.append(Phase(REPORT, self.report, "results table"))
        return phases

    def _evaluation(self, method: str, test: str) -> Phase:
        name = evaluation_phase(method, test)
        return Phase(name, lambda ctx: self.evaluate(ctx, method, test), f"{method} on {test}")

    # -- training -------------------------------------------------------------------------
    def adapter_name(self, ctx: RunContext) -> str:
        """The run's own adapter line (a resumed run keeps its id, so continues its line;
        another run never resumes it)."""
        return ctx.run_id if ctx.run_id.startswith(ADAPTER) else f"{ADAPTER}-{ctx.run_id}"

    def train_tb(self, ctx: RunContext) -> Path:
        return ctx.out_dir / "tb" / "train"

    def train(self, ctx: RunContext) -> dict[str, Any]:
        """Embedded mode trains in this process; service mode hands the job to the learner
        service as a "glam" policy job and waits for it (`llmrl.learner.policy_jobs`)."""
        cfg = self.config
        job = GlamTrainingJob(
            env=cfg.env,
            model=cfg.model,
            adapter=self.adapter_name(ctx),
            steps=cfg.train_steps,
            num_envs=cfg.num_envs,
            rollout_steps=cfg.rollout_steps,
            minibatch_size=cfg.minibatch_size,
            update_epochs=cfg.update_epochs,
            learning_rate=cfg.learning_rate,
            lora_layers=cfg.lora_layers,
            reduction=cfg.reduction,
            seed=cfg.seed,
            tensorboard_dir=str(self.train_tb(ctx)),
            simulator=ctx.simulator,
        )
        ctx.progress.start(TRAIN, job.steps, unit="steps")
        try:
            if ctx.simulator is None:
                return train_glam(job, on_progress=ctx.progress.advance)
            from llmrl.learner.policy_jobs import run_on_learner

            return run_on_learner(job, on_progress=ctx.progress.advance)
        finally:
            ctx.progress.finish()

    # -- evaluation -----------------------------------------------------------------------
    def policy(self, ctx: RunContext, method: str) -> dict[str, Any]:
        cfg = self.config
        if method == "random":
            return {"kind": driver.RANDOM}
        model = cfg.model if method == "zero-shot" else ctx.phase_outputs(TRAIN)["served_model"]
        return {
            "kind": driver.GLAM,
            "model": model,
            "reduction": cfg.reduction,
            "greedy": cfg.greedy,
        }

    def test_env(self, test: str) -> tuple[str, dict[str, Any]]:
        if test == "train":
            return self.config.env, {}
        if test in TEST_MIXES:
            return test, {}
        return self.config.env, {"variant": test}

    def evaluate(self, ctx: RunContext, method: str, test: str) -> dict[str, Any]:
        cfg = self.config
        phase = evaluation_phase(method, test)
        env, env_kwargs = self.test_env(test)
        policy = self.policy(ctx, method)
        jobs = [
            ctx.episode_job(
                phase,
                i,
                env=env,
                seed=cfg.seed + cfg.eval_seed_offset + i,
                policy=policy,
                env_kwargs=env_kwargs,
                max_steps=cfg.max_steps,
            )
            for i in range(cfg.eval_episodes)
        ]
        records = ctx.run_episodes(phase, jobs)
        return {"method": method, "test": test, **summarize(records)}

    def report(self, ctx: RunContext) -> dict[str, Any]:
        outputs = {
            phase.name: ctx.phase_outputs(phase.name)
            for phase in self.phases()
            if phase.name.startswith(("evaluate/", "generalise/"))
        }
        train = ctx.phase_outputs(TRAIN) if "glam" in self.config.methods else None
        plots = []
        curve = "learning_curve.png"
        title = f"llm-ppo on {self.config.env} (training episodes)"
        if train is not None and plot_learning_curve(
            self.train_tb(ctx), ctx.plot_path(curve), title
        ):
            plots.append(curve)
        results = glam_results(self.config, list(outputs.values()), train, plots)
        ctx.write_results(results)
        return {"rows": len(results.rows)}
