"""When2Ask's RL training as a self-contained job: the learner service runs it in service mode,
the recipe runs it in-process in embedded mode; either way the same function trains.

Registered as the learner's "when2ask" policy job (`POST /policy-jobs` with `"kind": "when2ask"`),
so the learner service finds it by name. It trains with the learner's registered "ppo" algorithm,
which saves a versioned checkpoint (`checkpoint_line(model_path)/<version>/`); the model file is
also put at `model_path`, where the recipe and its episode drivers find it. Two policies:
* `asking`: PPO on mediators (`MediatorEnv`), each over its own one-env world, with a planner
  built from a spec (`{"name": "oracle"}` or an LLM planner that reaches the gateway);
* `never-ask`: PPO on low-level actions over one batched world (the no-LLM baseline).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmrl.common.bounds import Coefficient, EpisodeSteps, Frames, LearningRate, RolloutSteps, Seed
from llmrl.common.registry import registry
from llmrl.common.threads import TorchThreads, job_threads, torch_thread_count
from llmrl.learner.algorithms.base import settings_of
from llmrl.learner.algorithms.sb3 import LrSchedule, learning_rate_schedule
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings

NEVER_ASK_KEYS = ["image", "direction"]
ALGORITHM = "ppo"  # a registered learner algorithm (llmrl.learner.algorithms)


class When2AskPpoSettings(BaseModel):
    """The PPO settings When2Ask's config and its training job both carry, written once (the
    config's keys are these; the job passes them on unchanged)."""

    n_envs: int = Field(8, ge=1, le=256, description="Mediator envs trained in parallel.")
    learning_rate: LearningRate = Field(3e-4, gt=0, description="PPO learning rate.")
    lr_schedule: LrSchedule = Field(
        "constant",
        description="PPO learning rate over training: constant (SB3's default) or linear "
        "(annealed from learning_rate to 0 at the last step, as CleanRL's ppo.py does).",
    )
    n_steps: RolloutSteps = Field(128, ge=8, description="PPO rollout length per env.")
    ent_coef: Coefficient = Field(0.01, ge=0, description="PPO entropy bonus.")

    def ppo_settings(self) -> dict[str, Any]:
        """These settings as the training job's keyword arguments."""
        return settings_of(self, When2AskPpoSettings)


class PolicyTrainingJob(When2AskPpoSettings):
    """Everything needed to train one When2Ask policy anywhere; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["when2ask"] = Field("when2ask", description="the learner's policy job kind")
    policy: Literal["asking", "never-ask"]
    env: str = Field(..., description="registered environment id")
    planner: dict[str, Any] = Field(
        default_factory=lambda: {"name": "oracle", "kwargs": {}},
        description="planner spec for `asking`: {name, kwargs}",
    )
    mediator: MediatorSettings = Field(
        default_factory=MediatorSettings, description="what a query costs, what it observes"
    )
    max_steps: EpisodeSteps = Field(200, ge=1)
    total_timesteps: Frames = Field(..., ge=1, description="PPO timesteps")
    checkpoint_every: Frames | None = Field(
        None,
        ge=1,
        description="timesteps between saved versions (None: one, at the end); a job the "
        "learner restarts after a stop goes on from the latest",
    )
    seed: Seed = 0
    torch_threads: TorchThreads = None
    model_path: str = Field(..., description="where the trained model (.zip) is written")
    tensorboard_dir: str | None = None
    run_id: str = Field("default", description="the run LLM calls are billed to")
    simulator: str | None = Field(None, description="simulator address; None: in-process")
    llm_gateway: str | None = Field(None, description="gateway address; None: in-process")


def _planner(job: PolicyTrainingJob, stream: int) -> Any:
    """The job's planner for training env `stream` (a noisy planner errs differently in each)."""
    from llmrl.planners.base import make_planner, reseeded

    def connect_llm() -> Any:
        from llmrl.llm_gateway.client import connect

        return connect(job.llm_gateway)

    return make_planner(
        reseeded(job.planner, stream),
        connect_llm=connect_llm,
        llm_defaults={"run_id": job.run_id, "tag": "when2ask/train"},
    )


def _vec_env(job: PolicyTrainingJob) -> tuple[Any, str]:
    """The VecEnv to train on and the SB3 policy class for it."""
    from llmrl.simulator.client import make_world

    if job.policy == "asking":
        from stable_baselines3.common.vec_env import DummyVecEnv

        from llmrl.recipes.when2ask.mediator import MediatorEnv

        def make(i: int) -> Callable[[], MediatorEnv]:
            seed = job.seed * 10_000 + i
            return lambda: MediatorEnv(
                lambda: make_world(job.env, num_envs=1, seed=seed, address=job.simulator),
                _planner(job, seed),
                job.mediator,
                max_steps=job.max_steps,
            )

        return DummyVecEnv([make(i) for i in range(job.n_envs)]), "MlpPolicy"

    from stable_baselines3.common.vec_env import VecMonitor

    from llmrl.learner.wrappers import FloatObservations
    from llmrl.simulator.vector import WorldVecEnv

    world = make_world(
        job.env, num_envs=job.n_envs, seed=job.seed * 10_000 + 5_000, address=job.simulator
    )
    venv = VecMonitor(FloatObservations(WorldVecEnv(world, keys=NEVER_ASK_KEYS)))
    return venv, "MultiInputPolicy"


@registry.register_policy_job("when2ask", request=PolicyTrainingJob)
def train_policy(
    job: PolicyTrainingJob, on_progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Train When2Ask's asking policy or never-ask baseline with PPO; returns the model path,
    its checkpoint (version directory and version) and the learning curve."""
    from llmrl.learner.algorithms.sb3 import model_file
    from llmrl.learner.versions import publish

    vec_env, policy = _vec_env(job)
    curve: list[dict[str, float]] = []
    try:
        with job_threads(job.torch_threads):  # the same on the learner as embedded
            checkpoint = registry.get_algorithm(ALGORITHM).train(
                vec_env,
                checkpoint_line(job.model_path),
                on_progress=on_progress,
                on_episode=lambda t, ep: curve.append({"t": t, **_numbers(ep)}),
                total_timesteps=job.total_timesteps,
                checkpoint_every=job.checkpoint_every,
                seed=job.seed,
                tensorboard_dir=job.tensorboard_dir,
                policy=policy,
                learning_rate=learning_rate_schedule(job.learning_rate, job.lr_schedule),
                n_steps=job.n_steps,
                batch_size=min(256, job.n_steps * job.n_envs),
                ent_coef=job.ent_coef,
            )
            threads = torch_thread_count()
    finally:
        vec_env.close()
    return {
        "model": str(publish(model_file(checkpoint), job.model_path)),
        "checkpoint": str(checkpoint.path),
        "version": checkpoint.version,
        "curve": curve,
        "torch_threads": threads,  # what it trained on, here or on the learner
    }


def checkpoint_line(model_path: str | Path) -> Path:
    """The directory whose versions hold the policies trained for `model_path`: beside it,
    named after it (`models/doorkey.zip`: `models/doorkey/<version>/`)."""
    path = Path(model_path)
    return (
        path.with_suffix("") if path.suffix == ".zip" else path.with_name(f"{path.name}.versions")
    )


def _numbers(episode: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in episode.items() if isinstance(v, int | float | bool)}
