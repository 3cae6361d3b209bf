"""`grpo`: an LLM policy trained by TRL's GRPOTrainer on multi-turn BabyAI-Text episodes.

Methods (`methods`), trained on the same env with the same env-step budget and evaluated on the
same held-out seeds (`seed + eval_seed_offset + i`, glam's):
* `zero-shot`: the base LLM scoring GLAM's prompt through the gateway: glam's own zero-shot
  evaluation (`Glam.evaluate`), so its row is the glam recipe's;
* `base`: the untrained LLM generating in GRPO's transcript form (what GRPO starts from);
* `grpo`: its LoRA trained by TRL's GRPOTrainer (`llmrl.recipes.grpo.training`: episodes
  through `rollout_func`, G episodes per seed, reward = the episode's return);
* `glam`: the glam recipe's LLM-PPO (action scoring, a value head), run by calling glam's own
  training and evaluation (`Glam.train`, `Glam.evaluate_curve`) with this run's env, model,
  budget, seed and held-out episodes; its other settings are glam's defaults or `glam`.

Phases: `evaluate/zero-shot`, `evaluate/base`, `train/grpo`, `evaluate/grpo` (every saved
version: the learning curve, the last is the result), `train/glam`, `evaluate/glam`, `report`
(the table: success, return, length, env steps, CPU-minutes of training).

    llmrl run grpo train_steps=3840 group_size=8 --out runs/grpo
"""

from __future__ import annotations

import time
from typing import Any

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.context import RunContext
from llmrl.recipes.glam.recipe import Glam
from llmrl.recipes.grpo import driver  # also registers the driver
from llmrl.recipes.grpo.config import GrpoConfig
from llmrl.recipes.grpo.report import grpo_results, grpo_targets, plot_learning_curve
from llmrl.recipes.grpo.training import GrpoTrainingJob, train_grpo
from llmrl.recipes.summary import summarize
from llmrl.recipes.targets import ConfigResults, Verdict

REPORT = "report"
TRAINED = ("grpo", "glam")


def evaluation_phase(method: str) -> str:
    return f"evaluate/{method}"


def train_phase(method: str) -> str:
    return f"train/{method}"


@registry.register_recipe("grpo", "GRPO (TRL) on an LLM policy in BabyAI-Text, against GLAM")
class Grpo(Recipe):
    Config = GrpoConfig
    config: GrpoConfig
    headline_metrics = ("success_rate", "mean_return", "mean_length", "cpu_minutes")
    # each method trains and is evaluated on its own: a comparison may run them in parts
    # (each with the zero-shot model its gain per CPU-minute is measured against)
    part_keys = ("methods",)

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        return grpo_targets(results)

    def phases(self) -> list[Phase]:
        phases = []
        for method in self.config.methods:
            if method in TRAINED:
                run = self.train_grpo if method == "grpo" else self.train_glam
                phases.append(Phase(train_phase(method), run, f"train {method}"))
            phases.append(Phase(evaluation_phase(method), self._evaluator(method), method))
        phases.append(Phase(REPORT, self.report, "results table"))
        return phases

    def _evaluator(self, method: str) -> Any:
        return {
            "zero-shot": lambda ctx: self.glam().evaluate(ctx, "zero-shot", "train"),
            "base": lambda ctx: self.evaluate(ctx, "base", self.policy(None)),
            "grpo": self.evaluate_curve,
            "glam": lambda ctx: self.glam().evaluate_curve(ctx, "glam"),
        }[method]

    def glam(self) -> Glam:
        """The glam recipe on this run's shared settings: its zero-shot and GLAM methods."""
        return Glam(self.config.glam_config())

    # -- training -------------------------------------------------------------------------
    def base_model(self) -> str:
        from llmrl.learner.adapters import base_model_dir

        cfg = self.config
        return cfg.hf_model or str(base_model_dir(cfg.model))

    def train_grpo(self, ctx: RunContext) -> dict[str, Any]:
        """TRL's GRPO in the process that runs the recipe, in embedded and service mode alike
        (its rollouts step the simulator service where there is one): GRPO's CPU time is
        half of this recipe's comparison, so it is measured here, as GLAM's is."""
        cfg = self.config
        job = GrpoTrainingJob(
            env=cfg.env,
            model=self.base_model(),
            out_dir=str(ctx.out_dir / "models" / "grpo"),
            total_timesteps=cfg.train_steps,
            group_size=cfg.group_size,
            groups_per_step=cfg.groups_per_step,
            learning_rate=cfg.learning_rate,
            lora_r=cfg.lora_r,
            lora_layers=cfg.lora_layers,
            beta=cfg.beta,
            temperature=cfg.temperature,
            scale_rewards=cfg.scale_rewards,
            checkpoint_every=cfg.eval_every,
            max_steps=cfg.max_steps,
            device=cfg.device,
            use_vllm=cfg.use_vllm,
            seed=cfg.seed,
            run_id=ctx.run_id,
            tensorboard_dir=str(ctx.out_dir / "tb" / train_phase("grpo")),
            simulator=ctx.simulator,
        )
        with ctx.training_here():
            return ctx.train(
                job, train_grpo, train_phase("grpo"), cfg.train_steps, threads=cfg.threads
            )

    def train_glam(self, ctx: RunContext) -> dict[str, Any]:
        """glam's own training, timed in CPU seconds of this process: here in service mode too
        (not on the learner), so that its CPU-minutes compare with GRPO's."""
        cpu, wall = time.process_time(), time.perf_counter()
        with ctx.training_here():
            out = self.glam().train(ctx, "glam")
        return {
            **out,
            "cpu_minutes": (time.process_time() - cpu) / 60,
            "wall_minutes": (time.perf_counter() - wall) / 60,
        }

    # -- evaluation -----------------------------------------------------------------------
    def policy(self, adapter: str | None) -> dict[str, Any]:
        cfg = self.config
        return {
            "kind": driver.GRPO,
            "model": cfg.model,
            "hub_model": cfg.hf_model,
            "adapter": adapter,
            "greedy": cfg.greedy,
            "temperature": cfg.temperature,
            "device": cfg.device,
        }

    def evaluate(
        self, ctx: RunContext, method: str, policy: dict[str, Any], phase: str | None = None
    ) -> dict[str, Any]:
        cfg = self.config
        phase = phase or evaluation_phase(method)
        jobs = [
            ctx.episode_job(
                phase,
                i,
                env=cfg.env,
                seed=cfg.seed + cfg.eval_seed_offset + i,
                policy=policy,
                max_steps=cfg.max_steps,
            )
            for i in range(cfg.eval_episodes)
        ]
        records = ctx.run_episodes(phase, jobs)
        return {"method": method, "test": "train", **summarize(records)}

    def evaluate_curve(self, ctx: RunContext) -> dict[str, Any]:
        """Every saved GRPO version on the held-out seeds; the last one is the result."""
        points = ctx.phase_outputs(train_phase("grpo"))["points"]
        writer = ctx.tensorboard
        curve = []
        for point in points:
            last = point is points[-1]
            phase = evaluation_phase("grpo") if last else f"curve/grpo/{point['update']}"
            summary = self.evaluate(ctx, "grpo", self.policy(point["adapter"]), phase)
            step = int(point["global_step"])
            curve.append({"update": point["update"], "global_step": step, **summary})
            if writer:
                for key in ("success_rate", "mean_return", "mean_length"):
                    writer.add_scalar(f"eval/grpo/{key}", summary[key], step)
        if writer:
            writer.flush()
        return {**curve[-1], "env_steps": curve[-1]["global_step"], "curve": curve}

    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        evaluations = [ctx.phase_outputs(evaluation_phase(m)) for m in cfg.methods]
        trained = {m: ctx.phase_outputs(train_phase(m)) for m in TRAINED if m in cfg.methods}
        plots = []
        title = f"grpo on {cfg.env}"
        tb = {m: ctx.out_dir / "tb" / train_phase(m) for m in trained}
        if plot_learning_curve(tb, evaluations, ctx.plot_path("learning_curve.png"), title):
            plots.append("learning_curve.png")
        results = grpo_results(cfg, evaluations, trained, plots)
        ctx.write_results(results)
        return {"rows": len(results.rows)}
