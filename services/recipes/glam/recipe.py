"""`glam`: PPO on an LLM policy in BabyAI-Text (Carta et al., ICML 2023), with baselines.

Methods (`methods`), each trained on the same env with the same env-step budget and evaluated
on the same held-out seeds:
* `zero-shot`: the base LLM through the gateway, untrained;
* `glam`: LLM-PPO with a LoRA (in-process; in service mode the learner's policy job "glam"
  over the simulator service; resumable: llm-ppo continues its adapter line), evaluated as
  `<model>:<adapter>@<version>` through the gateway; with `finetune=full` every pretrained
  weight is trained instead and played from its checkpoints in-process, like NPAE;
* `npae`: the same architecture with random weights, every weight trained by the same PPO,
  evaluated from its checkpoints in-process (`glam-checkpoint`);
* `symbolic-ppo`: Stable-Baselines3 PPO on BabyAI's grid view and mission word ids;
* `bc`: BabyAI's bot plays the budget's env steps; the LLM learns its action phrases from
  GLAM's prompts by LoRA SFT (the learner's `sft`, chat form), evaluated through the gateway;
* `drrn`: DRRN (He et al. 2016), a GRU Q-network over GLAM's text and the action phrases,
  trained by Stable-Baselines3 DQN (`llmrl.recipes.glam.drrn`);
* `random`: a uniformly random phrase.

Phases: `evaluate/zero-shot`; per trained method `train/<method>` (BC: `demos/bc` first) and
`evaluate/<method>`, which for the RL methods evaluates every version saved each `eval_every`
updates (the learning curve: TensorBoard `eval/<method>/...` and `learning_curve.png`) and
reports the last; `evaluate/random`; `generalise/<method>/<test>` per variant or test mix;
`report` (the results table, the paper's figures beside ours).

    llmrl run glam model=smollm2 train_steps=5120 eval_every=2 --out runs/glam
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.context import RunContext
from llmrl.recipes.glam import driver  # also registers the drivers
from llmrl.recipes.glam.config import (
    NPAE_MICROBATCH,
    RL_METHODS,
    TEST_MIXES,
    TRAINED_METHODS,
    GlamConfig,
)
from llmrl.recipes.glam.report import (
    action_distribution,
    glam_results,
    glam_targets,
    plot_eval_curves,
    plot_learning_curve,
)
from llmrl.recipes.glam.training import (
    GlamTrainingJob,
    collect_demonstrations,
    train_behaviour_cloning,
    train_glam,
    train_symbolic_ppo,
)
from llmrl.recipes.progress import tracked
from llmrl.recipes.summary import summarize
from llmrl.recipes.targets import ConfigResults, Verdict

REPORT, DEMOS = "report", "demos/bc"
ADAPTER = "glam"


def evaluation_phase(method: str, test: str = "train") -> str:
    return f"evaluate/{method}" if test == "train" else f"generalise/{method}/{test}"


def train_phase(method: str) -> str:
    return f"train/{method}"


@registry.register_recipe("glam", "GLAM: PPO on an LLM policy in BabyAI-Text, with baselines")
class Glam(Recipe):
    Config = GlamConfig
    config: GlamConfig
    headline_metrics = ("success_rate", "mean_return", "mean_length")

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        return glam_targets(results)

    def phases(self) -> list[Phase]:
        cfg = self.config
        phases = []
        for method in cfg.methods:
            if method == "bc":
                phases.append(Phase(DEMOS, self.demonstrations, "BabyAI bot demonstrations"))
            if method in TRAINED_METHODS:
                description = f"train {method}"
                phases.append(Phase(train_phase(method), self._trainer(method), description))
            phases.append(self._evaluation(method, "train"))
        for test in cfg.variants:
            phases += [self._evaluation(method, test) for method in cfg.methods]
        phases.append(Phase(REPORT, self.report, "results table"))
        return phases

    def _evaluation(self, method: str, test: str) -> Phase:
        name = evaluation_phase(method, test)
        if test == "train" and method in RL_METHODS:
            run = lambda ctx: self.evaluate_curve(ctx, method)  # noqa: E731
        else:
            run = lambda ctx: self.evaluate(ctx, method, test)  # noqa: E731
        return Phase(name, run, f"{method} on {test}")

    def _trainer(self, method: str) -> Any:
        return {
            "glam": lambda ctx: self.train(ctx, "glam"),
            "npae": lambda ctx: self.train(ctx, "npae"),
            "symbolic-ppo": self.train_symbolic,
            "drrn": self.train_drrn,
            "bc": self.train_bc,
        }[method]

    # -- training -------------------------------------------------------------------------
    def adapter_name(self, ctx: RunContext, method: str = "glam") -> str:
        """The run's own adapter line per method (a resumed run keeps its id, so continues
        its line; another run never resumes it)."""
        base = ctx.run_id if ctx.run_id.startswith(ADAPTER) else f"{ADAPTER}-{ctx.run_id}"
        return base if method == "glam" else f"{base}-{method}"

    def train_tb(self, ctx: RunContext, method: str = "glam") -> Path:
        return ctx.out_dir / "tb" / train_phase(method)

    def train(self, ctx: RunContext, method: str = "glam") -> dict[str, Any]:
        """GLAM or NPAE (`method`). Embedded mode trains in this process; service mode hands
        the job to the learner service as a "glam" policy job and waits for it."""
        cfg = self.config
        npae = method == "npae"
        full = cfg.full_finetune(method)
        ppo = cfg.ppo
        if full:  # NPAE, or GLAM fine-tuning every weight: every layer, in microbatches
            ppo = ppo.model_copy(
                update={
                    "lora_layers": None,
                    "microbatch_size": ppo.microbatch_size or NPAE_MICROBATCH,
                }
            )
        if npae:
            ppo = ppo.model_copy(update={"learning_rate": cfg.npae_learning_rate})
        job = GlamTrainingJob(
            env=cfg.env,
            model=cfg.model,
            adapter=self.adapter_name(ctx, method),
            total_timesteps=cfg.train_steps,
            ppo=ppo,
            lora=not full,
            init="random" if npae else "pretrained",
            checkpoint_every=cfg.eval_every,
            seed=cfg.seed,
            tensorboard_dir=str(self.train_tb(ctx, method)),
            simulator=ctx.simulator,
        )
        return ctx.train(job, train_glam, train_phase(method), job.total_timesteps)

    def train_symbolic(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        method = "symbolic-ppo"
        with tracked(ctx.progress, train_phase(method), cfg.train_steps, unit="steps"):
            return train_symbolic_ppo(
                cfg.env,
                ctx.out_dir / "models" / method,
                steps=cfg.train_steps,
                num_envs=cfg.ppo.num_envs,
                num_steps=cfg.ppo.num_steps,
                minibatch_size=cfg.ppo.minibatch_size,
                update_epochs=cfg.ppo.update_epochs,
                learning_rate=cfg.symbolic_learning_rate,
                eval_every=cfg.eval_every,
                seed=cfg.seed,
                simulator=ctx.simulator,
                tensorboard_dir=str(self.train_tb(ctx, method)),
                on_progress=ctx.progress.advance,
            )

    def train_drrn(self, ctx: RunContext) -> dict[str, Any]:
        from llmrl.recipes.glam.drrn import train_drrn

        cfg = self.config
        with tracked(ctx.progress, train_phase("drrn"), cfg.train_steps, unit="steps"):
            return train_drrn(
                cfg.env,
                ctx.out_dir / "models" / "drrn",
                steps=cfg.train_steps,
                num_envs=cfg.ppo.num_envs,
                num_steps=cfg.ppo.num_steps,
                learning_rate=cfg.drrn_learning_rate,
                eval_every=cfg.eval_every,
                seed=cfg.seed,
                simulator=ctx.simulator,
                tensorboard_dir=str(self.train_tb(ctx, "drrn")),
                on_progress=ctx.progress.advance,
            )

    def demonstrations(self, ctx: RunContext) -> dict[str, Any]:
        """BabyAI's bot plays the same env-step budget the RL methods train for."""
        cfg = self.config
        with tracked(ctx.progress, DEMOS, cfg.train_steps, unit="steps"):
            return collect_demonstrations(
                cfg.env,
                ctx.out_dir / "data" / "bc_demonstrations.jsonl",
                steps=cfg.train_steps,
                num_envs=cfg.ppo.num_envs,
                seed=cfg.seed,
                simulator=ctx.simulator,
                on_progress=ctx.progress.advance,
            )

    def train_bc(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        demos = ctx.phase_outputs(DEMOS)
        with tracked(ctx.progress, train_phase("bc"), cfg.bc_steps, unit="SFT steps"):
            return train_behaviour_cloning(
                demos["path"],
                cfg.model,
                self.adapter_name(ctx, "bc"),
                steps=cfg.bc_steps,
                batch_size=cfg.bc_batch_size,
                learning_rate=cfg.bc_learning_rate,
                lora_layers=cfg.ppo.lora_layers,
                lora_r=cfg.ppo.lora_r,
                seed=cfg.seed,
                on_progress=ctx.progress.advance,
            )

    # -- evaluation -----------------------------------------------------------------------
    def policy(
        self, ctx: RunContext, method: str, point: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The policy spec of `method`; for a trained one, of `point` (one saved version of
        its training; None: the last)."""
        cfg = self.config
        if method == "random":
            return {"kind": driver.RANDOM}
        if method != "zero-shot" and point is None:
            point = ctx.phase_outputs(train_phase(method))
        if method == "symbolic-ppo":
            return {"kind": driver.SYMBOLIC, "model": point["model"], "greedy": cfg.greedy}
        if method == "drrn":
            return {"kind": driver.DRRN, "model": point["model"], "greedy": cfg.greedy}
        scoring = {"reduction": cfg.ppo.reduction, "greedy": cfg.greedy}
        if cfg.full_finetune(method):
            return {"kind": driver.CHECKPOINT, "checkpoint": point["checkpoint"], **scoring}
        if method == "zero-shot":
            return {"kind": driver.GLAM, "model": cfg.model, **scoring}
        return {
            "kind": driver.GLAM,
            "model": point["served_model"],
            "chat": method == "bc",
            **scoring,
        }

    def test_env(self, test: str) -> tuple[str, dict[str, Any]]:
        if test == "train":
            return self.config.env, {}
        if test in TEST_MIXES:
            return test, {}
        return self.config.env, {"variant": test}

    def evaluate(
        self,
        ctx: RunContext,
        method: str,
        test: str,
        policy: dict[str, Any] | None = None,
        phase: str | None = None,
    ) -> dict[str, Any]:
        cfg = self.config
        phase = phase or evaluation_phase(method, test)
        env, env_kwargs = self.test_env(test)
        policy = policy or self.policy(ctx, method)
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
        summary = {"method": method, "test": test, **summarize(records)}
        distribution = action_distribution(records)
        return {**summary, "action_probabilities": distribution} if distribution else summary

    def evaluate_curve(self, ctx: RunContext, method: str) -> dict[str, Any]:
        """Every saved version of an RL method's training on the held-out seeds (each
        `eval_every` updates): the learning curve; the last one is the method's result."""
        trained = ctx.phase_outputs(train_phase(method))
        points = trained["points"]
        writer = ctx.tensorboard
        curve = []
        for point in points:
            last = point is points[-1]
            phase = evaluation_phase(method) if last else f"curve/{method}/{point['update']}"
            summary = self.evaluate(ctx, method, "train", self.policy(ctx, method, point), phase)
            step = int(point["global_step"])
            curve.append({"update": point["update"], "global_step": step, **summary})
            if writer:
                for key in ("success_rate", "mean_return", "mean_length"):
                    writer.add_scalar(f"eval/{method}/{key}", summary[key], step)
        if writer:
            writer.flush()
        return {**curve[-1], "env_steps": curve[-1]["global_step"], "curve": curve}

    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        outputs = {
            phase.name: ctx.phase_outputs(phase.name)
            for phase in self.phases()
            if phase.name.startswith(("evaluate/", "generalise/"))
        }
        steps = {"zero-shot": 0, "random": 0}
        for method in RL_METHODS:
            if method in cfg.methods:
                steps[method] = ctx.phase_outputs(evaluation_phase(method))["env_steps"]
        if "bc" in cfg.methods:
            steps["bc"] = ctx.phase_outputs(DEMOS)["env_steps"]
        plots = []
        curves = {
            method: ctx.phase_outputs(evaluation_phase(method))["curve"]
            for method in RL_METHODS
            if method in cfg.methods
        }
        if curves and plot_eval_curves(
            curves, ctx.plot_path("eval_curve.png"), f"held-out success on {cfg.env}"
        ):
            plots.append("eval_curve.png")
        title = f"llm-ppo on {cfg.env} (training episodes)"
        if "glam" in cfg.methods and plot_learning_curve(
            self.train_tb(ctx), ctx.plot_path("learning_curve.png"), title
        ):
            plots.append("learning_curve.png")
        trained = {
            method: ctx.phase_outputs(train_phase(method))
            for method in TRAINED_METHODS
            if method in cfg.methods
        }
        if "bc" in cfg.methods:
            trained["bc"] = {**trained["bc"], "demos": ctx.phase_outputs(DEMOS)}
        results = glam_results(cfg, list(outputs.values()), steps, trained, plots)
        ctx.write_results(results)
        return {"rows": len(results.rows)}
