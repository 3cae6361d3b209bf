"""`when2ask`: learn when to ask the LLM planner (Hu et al. 2023, arXiv 2306.03604).

Per task: train the asking policy with PPO on mediator environments over simulator worlds,
train the never-ask baseline (PPO on low-level actions, no planner), then evaluate every
method on the same seeds through the episode machinery (rollout workers in service mode):
always-ask, forced-only and news-or-skill-end (the paper's hard-coded rule), random-ask (at the
learned policy's ask rate), learned, never-ask.
The report puts the paper's Table 1 beside the measured figures and draws the learning
curves and a queries-versus-success chart.

    llmrl run when2ask envs=[SimpleDoorKey] planner=oracle
    llmrl run when2ask planner=noisy planner_noise=0.2   # the oracle, wrong 20% of the time
    llmrl run when2ask planner=noisy planner_noise_mode=persistent max_steps=25   # errors cost
    llmrl run when2ask planner=local planner_temperature=1   # SmolLM2 samples a feasible skill
"""

from __future__ import annotations

from typing import Any

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.context import RunContext
from llmrl.recipes.results import Results
from llmrl.recipes.targets import ConfigResults, Verdict
from llmrl.recipes.when2ask import driver as _driver  # noqa: F401 - registers policy kinds
from llmrl.recipes.when2ask.asking import (
    FORCED_ONLY,
    NEWS_OR_SKILL_END,
    REFERENCE_RULES,
    UNTIL_CONFIDENT,
)
from llmrl.recipes.when2ask.config import EVAL_SEED_OFFSET, NEVER_ASK, When2AskConfig
from llmrl.recipes.when2ask.report import (
    PAPER,
    ledger_note,
    planner_note,
    plot_learning_curves,
    plot_queries_vs_success,
    summarize,
    training_curves,
    when2ask_targets,
)
from llmrl.recipes.when2ask.training import (
    NEVER_ASK_KEYS,
    PolicyTrainingJob,
    train_policy,
)


@registry.register_recipe("when2ask", "Learn when to ask the LLM planner (MiniGrid tasks)")
class When2Ask(Recipe):
    Config = When2AskConfig
    config: When2AskConfig
    # The paper's figures are per run, not per seed: aggregating them would only repeat them.
    headline_metrics = ("success_%", "queries/ep", "return_penalised", "cost/ep_usd")

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        return when2ask_targets(results)

    def methods(self) -> list[str]:
        """The methods evaluated, in evaluation order ("learned" first: random-ask uses its
        ask rate); never-ask only when its PPO baseline is trained (never_ask_steps > 0)."""
        chosen = set(self.config.methods)
        if self.config.never_ask_steps == 0:
            chosen.discard(NEVER_ASK)
        order = (
            "learned",
            "always",
            FORCED_ONLY,
            NEWS_OR_SKILL_END,
            *REFERENCE_RULES,
            "random",
            NEVER_ASK,
        )
        return [m for m in order if m in chosen]

    def phases(self) -> list[Phase]:
        phases: list[Phase] = []
        methods = self.methods()
        for env in self.config.envs:
            if "learned" in methods:
                phases.append(Phase(f"train/{env}", self._train(env), "PPO asking policy"))
            if NEVER_ASK in methods:
                phases.append(
                    Phase(f"train-never/{env}", self._train(env, "never-ask"), "PPO baseline")
                )
            for method in methods:
                phases.append(
                    Phase(f"evaluate/{env}/{method}", self._evaluate(env, method), method)
                )
        phases.append(Phase("report", self.report, "results table and plots"))
        return phases

    # -- planners ---------------------------------------------------------------------------
    def planner_spec(self) -> dict[str, Any]:
        cfg = self.config
        if cfg.planner == "oracle":
            return {"name": "oracle", "kwargs": {}}
        if cfg.planner == "noisy":
            kwargs: dict[str, Any] = {"p": cfg.planner_noise, "seed": cfg.seed}
            if cfg.planner_noise_mode != "fresh":  # fresh: the planner's default
                kwargs["mode"] = cfg.planner_noise_mode
            return {"name": "noisy-oracle", "kwargs": kwargs}
        mode = cfg.planner_mode or ("score" if cfg.planner == "local" else "generate")
        kwargs = {"mode": mode, "model": cfg.planner_model}
        if cfg.planner_temperature > 0:
            kwargs.update(temperature=cfg.planner_temperature, seed=cfg.seed)
        return {"name": "when2ask-llm", "kwargs": kwargs}

    # -- training ---------------------------------------------------------------------------
    def _training_job(self, ctx: RunContext, env: str, policy: str) -> PolicyTrainingJob:
        cfg = self.config
        name = f"{env}-{policy}"
        return PolicyTrainingJob(
            policy=policy,  # type: ignore[arg-type]
            env=env,
            planner=self.planner_spec(),
            mediator=cfg.mediator(),
            max_steps=cfg.max_steps,
            total_timesteps=cfg.train_steps if policy == "asking" else cfg.never_ask_steps,
            **cfg.ppo_settings(),
            seed=cfg.seed,
            # a small MLP: one thread, and the same figures on any core count, here and on
            # the learner (llmrl.common.threads)
            torch_threads=1,
            model_path=str(ctx.out_dir / "models" / f"{name}.zip"),
            tensorboard_dir=str(ctx.out_dir / "tb" / name),
            run_id=ctx.run_id,
            simulator=ctx.simulator,
            llm_gateway=ctx.llm_gateway,
        )

    def _train(self, env: str, policy: str = "asking"):
        """PPO for the asking policy (or, policy="never-ask", the no-LLM baseline).

        Embedded mode trains in this process; service mode hands the job to the learner
        service as a "when2ask" policy job and waits for it (see `llmrl.learner.policy_jobs`).
        """

        def run(ctx: RunContext) -> dict[str, Any]:
            job = self._training_job(ctx, env, policy)
            phase = f"train {env} ({policy})"
            result = ctx.train(job, train_policy, phase, job.total_timesteps)
            ctx.add_artifact(f"models/{env}-{policy}.zip", result["model"], kind="model")
            return result

        return run

    # -- evaluation -------------------------------------------------------------------------
    def _policy(self, ctx: RunContext, env: str, method: str) -> dict[str, Any]:
        cfg = self.config
        if method == NEVER_ASK:
            model = ctx.phase_outputs(f"train-never/{env}")["model"]
            return {"kind": "sb3", "name": NEVER_ASK, "model": model, "keys": NEVER_ASK_KEYS}
        ask: dict[str, Any] = {"method": method}
        if method == "learned":
            ask["model"] = ctx.phase_outputs(f"train/{env}")["model"]
        if method == "random":
            ask["p"] = self._random_ask_rate(ctx, env)
        if method == UNTIL_CONFIDENT:
            ask["threshold"] = cfg.confident_at
        return {
            "kind": "when2ask",
            "name": method,
            "ask": ask,
            "planner": self.planner_spec(),
            **cfg.mediator().model_dump(),
        }

    def _random_ask_rate(self, ctx: RunContext, env: str) -> float:
        """random_ask_p, else the learned policy's ASK rate per step on its evaluation."""
        if self.config.random_ask_p is not None:
            return self.config.random_ask_p
        return float(ctx.phase_outputs(f"evaluate/{env}/learned")["ask_rate"])

    def _evaluate(self, env: str, method: str):
        def run(ctx: RunContext) -> dict[str, Any]:
            cfg = self.config
            phase = f"evaluate/{env}/{method}"
            policy = self._policy(ctx, env, method)
            jobs = [
                ctx.episode_job(
                    phase,
                    i,
                    env=env,
                    seed=EVAL_SEED_OFFSET + cfg.seed * 10_000 + i,
                    policy=policy,
                    max_steps=cfg.max_steps,
                )
                for i in range(cfg.eval_episodes)
            ]
            records = ctx.run_episodes(phase, jobs)
            summary = summarize(records)
            ctx.set_summary(**{f"{env}/{method}/success_rate": summary["success_rate"]})
            return summary

        return run

    # -- report -----------------------------------------------------------------------------
    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        rows = []
        for env in cfg.envs:
            for method in self.methods():
                summary = ctx.phase_outputs(f"evaluate/{env}/{method}")
                paper_success, paper_queries = PAPER[env].get(method, (None, None))
                row = {
                    "task": env,
                    "method": method,
                    "success_%": 100 * summary["success_rate"],
                    "queries/ep": summary["queries_per_episode"],
                    "steps/ep": summary["mean_length"],
                    "return": summary["mean_return"],
                    "return_penalised": summary["mean_return_penalised"],
                    "tokens/ep": summary["tokens_per_episode"],
                    "cost/ep_usd": summary["cost_per_episode_usd"],
                    "paper_success_%": paper_success,
                    "paper_queries/ep": paper_queries,
                }
                if cfg.planner == "noisy":  # its errors are known: how each method met them
                    row["wrong_plans/ep"] = summary.get("wrong_plans_per_episode")
                    row["wrong_plan_steps/ep"] = summary.get("wrong_plan_steps_per_episode")
                rows.append(row)
        plots = ["when2ask_learning_curves.png", "when2ask_queries_vs_success.png"]
        curves = {
            env: {
                kind: ctx.phase_outputs(f"{kind}/{env}").get("curve", [])
                for kind in ("train", "train-never")
                if _completed(ctx, f"{kind}/{env}")
            }
            for env in cfg.envs
        }
        plot_learning_curves(curves, ctx.plot_path(plots[0]))
        plot_queries_vs_success(rows, ctx.plot_path(plots[1]))
        notes = [
            f"planner: {cfg.planner}" + planner_note(cfg, self.planner_spec()),
            f"{FORCED_ONLY}: asks only when the plan is finished or infeasible; "
            f"{NEWS_OR_SKILL_END}: the paper's hard-coded rule, asks when the agent's knowledge "
            "changes or its skill ends",
            f"λ={cfg.lam}, same-plan penalty={cfg.same_plan_penalty}, new-plan bonus="
            f"{cfg.new_plan_bonus}; the mediator "
            f"{'sees' if cfg.mediator_sees_plan else 'does not see'} the skill in hand; "
            f"{'reads' if cfg.mediator_sees_knowledge else 'does not read'} the planner's "
            "input (the agent's knowledge) and the plan's object; "
            f"{'counts' if cfg.mediator_counts_objects else 'does not count'} the objects it "
            f"knows; {'sees' if cfg.mediator_sees_confidence else 'does not see'} the "
            "planner's confidence; "
            f"{'sees' if cfg.mediator_sees_time else 'does not see'} its clock; "
            f"{cfg.eval_episodes} "
            f"evaluation episodes per method; PPO {cfg.train_steps} steps "
            f"(never-ask: {cfg.never_ask_steps}); step cap {cfg.max_steps} mediator steps",
            "queries/ep counts every planner query (asked and forced); return is the "
            "environment's, return_penalised subtracts the query penalties",
            "paper: Hu et al. 2023 Table 1 (Vicuna planner, 500 episodes)",
        ]
        if cfg.planner == "noisy":
            notes.append(
                "wrong_plans/ep: queries whose plan the noisy planner made wrong; "
                "wrong_plan_steps/ep: steps spent following such a plan until a query "
                "replaced it (a diagnostic the mediator never observes)"
            )
        if cfg.planner in ("local", "llm"):
            notes.append(ledger_note(ctx.llm.usage(ctx.run_id)))
        results = Results(
            title="when2ask", rows=rows, notes=notes, plots=plots, curves=training_curves(curves)
        )
        ctx.write_results(results)
        return {"results": "results.json"}


def _completed(ctx: RunContext, phase: str) -> bool:
    return ctx.store.phase_outputs(ctx.run_id, phase) is not None
