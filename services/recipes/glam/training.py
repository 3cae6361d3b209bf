"""GLAM's training and its baselines' training.

`train_glam` is GLAM's (and NPAE's) training as a self-contained job: the learner service
runs it in service mode (the policy job kind "glam", `POST /policy-jobs`), the recipe runs
it in-process in embedded mode; either way the same function trains, with the learner's
`llm-ppo` algorithm stepping the simulator (in-process, or the service at `simulator` over
gRPC). The adapter line is `adapter_versions(model, adapter)` under the process's
LLMRL_HOME, which the gateway serves as `<model>:<adapter>@<version>`: in service mode the
learner and the gateway must share it. NPAE is the same job with `init="random"` and
`lora=False` (the whole model is trained and saved; it is evaluated from its checkpoint,
not through the gateway).

The baselines train where the recipe runs (their envs in-process, or at the simulator service):
* `train_symbolic_ppo`: the learner's `ppo` (Stable-Baselines3, MultiInputPolicy) on BabyAI's
  symbolic view (`image`, `direction`, `mission_tokens`), a version every `eval_every` updates;
* `collect_demonstrations`: BabyAI's bot (`oracle_plan` of an env made with `expert=True`)
  plays; every step becomes a chat example, GLAM's prompt -> the bot's action phrase, which
  behaviour cloning learns with the learner's `sft` algorithm (`train_behaviour_cloning`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from llmrl.common.names import Name
from llmrl.common.registry import registry
from llmrl.recipes.glam.llm_ppo import LlmPpoSettings, LlmPpoTraining


class GlamTrainingJob(LlmPpoTraining):
    """Everything needed to train one GLAM adapter anywhere: the model, env and adapter line,
    and LLM-PPO's training keys (`LlmPpoTraining`, `ppo` among them) as the algorithm
    declares them; unknown keys are errors."""

    kind: Literal["glam"] = Field("glam", description="the learner's policy job kind")
    env: str = Field(..., description="registered text env id")
    # a gateway model name, or a local model directory (confined by the learner, as paths are)
    model: str = Field(..., description="gateway model name of the base LLM, or its directory")
    adapter: Name = Field(..., description="the adapter line's name (one folder name)")
    simulator: str | None = Field(None, description="simulator address; None: in-process")

    @field_validator("env")
    @classmethod
    def _env_is_a_glam_env(cls, value: str) -> str:
        """Refused when the request is parsed, not when the job reaches its first rollout."""
        from llmrl.recipes.config import registered_env
        from llmrl.recipes.glam.config import GLAM_ENVS

        return registered_env(value, "glam", GLAM_ENVS)


@registry.register_policy_job("glam", request=GlamTrainingJob)
def train_glam(
    job: GlamTrainingJob, on_progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """LLM-PPO on the job's env; resumes the adapter line where a killed run left it.
    Returns the served model name of the last version, where training stood, and every
    version of the line (`points`: version, served model, checkpoint, update, env steps)."""
    from llmrl.learner.adapters import adapter_versions

    line = adapter_versions(job.model, job.adapter)
    checkpoint = registry.get_algorithm("llm-ppo").train(
        job.env,
        line,
        on_progress=on_progress,
        base_model=job.model,
        address=job.simulator,
        **job.training(),
    )
    points = []
    for version in line.versions():
        saved = line.get(version)
        points.append(
            {
                "version": version,
                "served_model": f"{job.model}:{job.adapter}@{version}",
                "checkpoint": str(saved.path),
                "update": saved.result.get("update"),
                "global_step": saved.result.get("global_step"),
            }
        )
    return {
        "served_model": f"{job.model}:{job.adapter}@{checkpoint.path.name}",
        "checkpoint": str(checkpoint.path),
        "update": checkpoint.result.get("update"),
        "global_step": checkpoint.result.get("global_step"),
        "points": points,
    }


# -- Symbolic-PPO ------------------------------------------------------------------------------
SYMBOLIC_KEYS = ("image", "direction", "mission_tokens")


def train_symbolic_ppo(
    env: str,
    out_dir: Path,
    *,
    steps: int,
    num_envs: int,
    num_steps: int,
    minibatch_size: int,
    update_epochs: int,
    learning_rate: float,
    eval_every: int,
    seed: int,
    simulator: str | None = None,
    tensorboard_dir: str | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """SB3 PPO (the learner's `ppo`) on the grid with the run's rollout shape (envs x steps
    per update, epochs, minibatch) and GLAM's code's return and loss settings
    (`symbolic_ppo_returns`). A version of the line `out_dir` every `eval_every` updates and at
    the end: `points` (model file, update, env steps)."""
    from stable_baselines3.common.vec_env import VecMonitor

    from llmrl.learner.wrappers import FloatObservations
    from llmrl.simulator.client import make_world
    from llmrl.simulator.vector import WorldVecEnv

    per_update = num_envs * num_steps
    world = make_world(env, num_envs=num_envs, seed=seed * 10_000 + 5_000, address=simulator)
    venv = VecMonitor(FloatObservations(WorldVecEnv(world, keys=SYMBOLIC_KEYS)))
    try:
        return learn_in_updates(
            "ppo",
            venv,
            out_dir,
            steps=steps,
            per_update=per_update,
            eval_every=eval_every,
            seed=seed,
            policy="MultiInputPolicy",
            tensorboard_dir=tensorboard_dir,
            on_progress=on_progress,
            learning_rate=learning_rate,
            n_steps=num_steps,
            batch_size=min(minibatch_size, per_update),
            n_epochs=update_epochs,
            **symbolic_ppo_returns(),
        )
    finally:
        venv.close()


def symbolic_ppo_returns() -> dict[str, float]:
    """Symbolic-PPO's return and loss settings: llm-ppo's defaults (GLAM's code's values) under
    SB3's names. They stay at these values whatever a run sets for GLAM (gamma, gae_lambda...):
    the baseline as GLAM's code trains it."""
    defaults = LlmPpoSettings()
    return {
        "gamma": defaults.gamma,
        "gae_lambda": defaults.gae_lambda,
        "clip_range": defaults.clip_coef,
        "ent_coef": defaults.ent_coef,
        "vf_coef": defaults.vf_coef,
        "max_grad_norm": defaults.max_grad_norm,
    }


def learn_in_updates(
    algorithm: str,
    venv: Any,
    out_dir: Path,
    *,
    steps: int,
    per_update: int,
    eval_every: int,
    **training: Any,
) -> dict[str, Any]:
    """Train with the learner's SB3 `algorithm` for `steps // per_update` "updates" of
    `per_update` env steps (the PPO methods' unit, so every learning curve shares its x), a
    version of the line `out_dir` every `eval_every` updates and at the end (a killed run
    goes on from its latest): the last model and every version, the evaluation points."""
    from llmrl.learner.algorithms.sb3 import model_file
    from llmrl.learner.versions import Versions

    line = Versions(out_dir)
    updates = max(1, steps // per_update)
    registry.get_algorithm(algorithm).train(
        venv,
        line,
        total_timesteps=updates * per_update,
        checkpoint_every=eval_every * per_update,
        **training,
    )
    points = []
    for version in line.versions():
        saved = line.get(version)
        step = int(saved.result["timesteps"])
        points.append(
            {"model": str(model_file(saved)), "update": step // per_update, "global_step": step}
        )
    return {**points[-1], "points": points}


# -- behaviour cloning ----------------------------------------------------------------------------
def collect_demonstrations(
    env: str,
    path: Path,
    *,
    steps: int,
    num_envs: int,
    seed: int,
    simulator: str | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """BabyAI's bot plays `steps` env steps (all envs); each of its steps is written to `path`
    as a chat example: GLAM's prompt (user) -> the bot's action phrase (assistant). A step
    where the bot has given up is played by "turn left" and not recorded."""
    import numpy as np

    from llmrl.recipes.glam.driver import env_phrases
    from llmrl.recipes.glam.prompt import PromptHistory
    from llmrl.simulator.client import make_world
    from llmrl.simulator.world import episode_ends

    wanted = ["text", "mission", "oracle_plan", "action_phrases", "reward", "discount", "step_type"]
    world = make_world(env, num_envs=num_envs, seed=seed, address=simulator, expert=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    examples, episodes, successes, taken_steps = 0, 0, 0, 0
    try:
        first = world.reset(seed=seed, observations=wanted)
        phrases = [env_phrases({"action_phrases": p}) for p in first["action_phrases"]]
        histories = [PromptHistory(phrases[i]) for i in range(num_envs)]
        for i, history in enumerate(histories):
            history.start(str(first["mission"][i]), str(first["text"][i]))
        plan = [str(p) for p in first["oracle_plan"]]
        with path.open("w", encoding="utf-8") as handle:
            while taken_steps < steps:
                chosen = []
                for i, history in enumerate(histories):
                    phrase = plan[i] if plan[i] in phrases[i] else ""
                    if phrase:
                        example = [
                            {"role": "user", "content": history.prompt()},
                            {"role": "assistant", "content": phrase},
                        ]
                        handle.write(json.dumps({"messages": example}) + "\n")
                        examples += 1
                    chosen.append(phrase or phrases[i][0])
                result = world.step(skill=chosen, observations=wanted)
                taken_steps += num_envs
                if on_progress is not None:
                    on_progress(num_envs)
                terminated, truncated = episode_ends(result)
                ended = terminated | truncated
                plan = [str(p) for p in result["oracle_plan"]]
                for i, history in enumerate(histories):
                    history.advance(chosen[i], str(result["text"][i]))
                if ended.any():
                    restarted = world.step(observations=wanted, active=ended)
                    for i in np.flatnonzero(ended):
                        episodes += 1
                        successes += int(bool(terminated[i]) and result["reward"][i] > 0)
                        histories[i].start(str(restarted["mission"][i]), str(restarted["text"][i]))
                        plan[i] = str(restarted["oracle_plan"][i])
    finally:
        world.close()
    return {
        "path": str(path),
        "examples": examples,
        "env_steps": taken_steps,
        "episodes": episodes,
        "bot_success_rate": successes / episodes if episodes else None,
    }


def train_behaviour_cloning(
    data: str,
    model: str,
    adapter: str,
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    lora_layers: int | None,
    lora_r: int,
    seed: int,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """LoRA SFT (the learner's `sft`) of gateway model `model` on the demonstrations; the
    adapter is served as `<model>:<adapter>@<version>`."""
    from llmrl.learner.adapters import adapter_versions, base_model_dir

    checkpoint = registry.get_algorithm("sft").train(
        data,
        adapter_versions(model, adapter),
        on_progress=on_progress,
        base_model=str(base_model_dir(model)),
        steps=steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        lora_layers=lora_layers,
        lora_r=lora_r,
        seed=seed,
    )
    result = checkpoint.result
    return {
        "served_model": f"{model}:{adapter}@{checkpoint.path.name}",
        "checkpoint": str(checkpoint.path),
        "sft_steps": result.get("steps"),
        "first_loss": result.get("first_loss"),
        "last_loss": result.get("last_loss"),
    }
