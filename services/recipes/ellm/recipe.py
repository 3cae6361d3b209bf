"""`ellm`: LLM-suggested exploration goals in Crafter (Du et al., ICML 2023), with baselines.

Phases, for each method (`ellm`, `oracle`, `all-goals`, `rnd`, `knn`, `none`):
`pretrain/<method>` (dqn-ellm under the method's intrinsic reward, crafter's reward ignored;
in-process, or the learner's policy job "ellm" over the simulator service in service mode;
resumable from the line's latest checkpoint), `evaluate/<method>` (the pretrained agent's
achievements over held-out episodes); then `finetune/<method>` for each of `finetune_from`
and `finetune/scratch` (the task reward only), and `report` (results table, PNGs).
`llmrl run ellm env=CrafterText methods='[ellm,oracle,none]' --out runs/ellm`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.context import RunContext
from llmrl.recipes.ellm.config import EllmConfig
from llmrl.recipes.ellm.report import ellm_results, ellm_targets
from llmrl.recipes.ellm.training import (
    EllmEnvSettings,
    EllmTrainingJob,
    evaluate_agent,
    train_ellm,
)
from llmrl.recipes.progress import tracked
from llmrl.recipes.targets import ConfigResults, Verdict

REPORT = "report"
NOVELTY = ("rnd", "knn", "none")  # methods that never call the LLM
SCRATCH = "scratch"


@registry.register_recipe(
    "ellm", "ELLM: LLM-suggested exploration goals in Crafter (DQN), with novelty baselines"
)
class Ellm(Recipe):
    Config = EllmConfig
    config: EllmConfig
    headline_metrics = (
        "achievements_last10",
        "eval_achievements",
        "crafter_score",
        "rearranged_last10",  # Housekeep
        "eval_rearranged",
        "eval_success_rate",
    )

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        return ellm_targets(results)

    def phases(self) -> list[Phase]:
        cfg = self.config
        phases = []
        for method in cfg.methods:
            phases.append(
                Phase(f"pretrain/{method}", self._pretrain(method), f"pretrain with {method}")
            )
            phases.append(Phase(f"evaluate/{method}", self._evaluate(method), f"evaluate {method}"))
        if cfg.finetune_frames > 0:
            for start in [*cfg.finetune_from, SCRATCH]:
                phases.append(
                    Phase(f"finetune/{start}", self._finetune(start), f"fine-tune from {start}")
                )
        phases.append(Phase(REPORT, self.report, "results table and plots"))
        return phases

    def _pretrain(self, method: str):
        return lambda ctx: self.train(ctx, "pretrain", method)

    def _evaluate(self, method: str):
        return lambda ctx: self.evaluate(ctx, method)

    def _finetune(self, start: str):
        return lambda ctx: self.train(ctx, "finetune", start)

    # -- settings ---------------------------------------------------------------------------
    def settings(self, ctx: RunContext, stage: str, method: str) -> dict[str, Any]:
        """The env and reward settings of one stage (pretrain, evaluate, finetune) of a method.
        Fine-tuning keeps the pretrained method's observations (goal conditioning) but pays
        only the task; from scratch it is the plain agent."""
        cfg = self.config
        finetuning = stage == "finetune"
        source = "none" if method == SCRATCH else method
        return {
            "env": cfg.env,
            "env_kwargs": cfg.env_kwargs,
            "num_envs": cfg.num_envs,
            "method": source,
            "suggester": cfg.suggester,
            "model": cfg.model,
            "embed_model": cfg.embed_model,
            "threshold": cfg.threshold,
            "conditioning": cfg.conditioning if source not in ("rnd", "knn", "none") else "none",
            "intrinsic_scale": 0.0 if finetuning else 1.0,
            "task": cfg.finetune_task if finetuning else None,
            "seed": cfg.seed + (1_000 if stage == "evaluate" else 0),
            "run_id": ctx.run_id,
            "tag": f"ellm/{stage}/{method}",
        }

    def line_name(self, method: str) -> str:
        """A PPO line is `<method>-ppo`: a run switched to the other agent in the same directory
        starts lines of its own (versions, episodes, TensorBoard), never going on in another's."""
        return method if self.config.agent == "dqn" else f"{method}-{self.config.agent}"

    def line(self, ctx: RunContext, stage: str, method: str) -> Path:
        return ctx.out_dir / "checkpoints" / stage / self.line_name(method)

    def dqn_settings(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "learning_rate": cfg.learning_rate,
            "buffer_size": cfg.buffer_size,
            "learning_starts": cfg.learning_starts,
            "exploration_fraction": cfg.exploration_fraction,
            "target_network_frequency": cfg.target_network_frequency,
            "train_frequency": cfg.train_frequency,
            "hidden": cfg.hidden,
            "checkpoint_every": cfg.checkpoint_every,
        }

    # -- phases -----------------------------------------------------------------------------
    def train(self, ctx: RunContext, stage: str, method: str) -> dict[str, Any]:
        """Embedded mode trains in this process; service mode hands the job to the learner
        service as an "ellm" policy job and waits for it (`llmrl.learner.policy_jobs`)."""
        cfg = self.config
        frames = cfg.pretrain_frames if stage == "pretrain" else cfg.finetune_frames
        init_from = None
        if stage == "finetune" and method != SCRATCH:
            init_from = ctx.phase_outputs(f"pretrain/{method}")["checkpoint"]
        job = EllmTrainingJob(
            **self.settings(ctx, stage, method),
            frames=frames,
            agent=cfg.agent,
            dqn=self.dqn_settings() if cfg.agent == "dqn" else {},
            ppo=cfg.ppo if cfg.agent == "ppo" else {},
            checkpoint_every=cfg.checkpoint_every if cfg.agent == "ppo" else None,
            model_path=str(self.line(ctx, stage, method)),
            init_from=init_from,
            tensorboard_dir=str(ctx.out_dir / "tb" / stage / self.line_name(method)),
            simulator=ctx.simulator,
            llm_gateway=ctx.llm_gateway,
            # a small MLP: one thread, here and on the learner (llmrl.common.threads)
            torch_threads=1,
        )
        phase = f"{stage}/{method}"
        result = ctx.train(job, train_ellm, phase, frames, unit="frames")
        uses_llm = job.reward_method not in NOVELTY
        result["usage"] = self._usage(ctx, f"ellm/{stage}/{method}") if uses_llm else {}
        return {"method": method, "stage": stage, **result}

    def evaluate(self, ctx: RunContext, method: str) -> dict[str, Any]:
        cfg = self.config
        checkpoint = ctx.phase_outputs(f"pretrain/{method}")["checkpoint"]
        values = self.settings(ctx, "evaluate", method)
        if values["conditioning"] == "none":  # the agent does not read the suggestions:
            values["method"] = "none"  # evaluating it needs no LLM call
        settings = EllmEnvSettings(**values)
        phase = f"evaluate/{method}"
        with tracked(ctx.progress, phase, cfg.eval_episodes):
            episodes = evaluate_agent(
                settings,
                checkpoint,
                cfg.eval_episodes,
                cfg.eval_epsilon,
                llm=ctx.llm if settings.method not in NOVELTY else None,
                simulator=ctx.simulator,
                on_episode=lambda episode: ctx.progress.advance(1),
                agent=cfg.agent,
            )
        return {"method": method, "episodes": episodes}

    def _usage(self, ctx: RunContext, tag: str) -> dict[str, float]:
        """The gateway ledger's figures for one tag of this run (zeros when never called)."""
        try:
            usage = ctx.llm.usage(ctx.run_id)
        except Exception:  # a gateway that cannot answer leaves the figures empty
            return {}
        figures = usage.get("tags", {}).get(tag, {})
        return {
            key: float(figures.get(key, 0) or 0)
            for key in ("requests", "cache_hits", "model_calls", "cost_usd")
        }

    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        pretrain = {m: ctx.phase_outputs(f"pretrain/{m}") for m in cfg.methods}
        evaluations = {m: ctx.phase_outputs(f"evaluate/{m}") for m in cfg.methods}
        finetune = {}
        if cfg.finetune_frames > 0:
            finetune = {
                start: ctx.phase_outputs(f"finetune/{start}")
                for start in [*cfg.finetune_from, SCRATCH]
            }
        results = ellm_results(cfg, ctx.out_dir, pretrain, evaluations, finetune)
        ctx.write_results(results)
        headline = "crafter_score" if results.rows and "crafter_score" in results.rows[0] else None
        headline = headline or "eval_success_rate"  # Housekeep
        ctx.set_summary(**{f"{headline}/{row['method']}": row[headline] for row in results.rows})
        return {"rows": len(results.rows)}
