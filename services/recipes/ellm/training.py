"""ELLM's training as a self-contained job: the learner service runs it in service mode (the
policy job kind "ellm", `POST /policy-jobs`), the recipe runs it in-process in embedded mode;
either way the same function trains, with the learner's `dqn-ellm` on a world of CrafterText
envs (in-process, or the simulator service over gRPC) under the method's intrinsic reward
(`intrinsic.py`), its LLM calls going to the gateway (in-process, or the service).

A job pretrains (intrinsic reward only, crafter's reward ignored) or fine-tunes (the task
reward only: 1 when the task's achievement is unlocked; from a pretrained checkpoint or from
scratch). Its checkpoint line is `model_path`; every finished training episode is appended to
`model_path/episodes.jsonl` with the frame it ended at (the curves); a resumed job first drops
the episodes logged after its latest version, then continues from that version.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from llmrl.common.bounds import Seed
from llmrl.common.paths import confined_field
from llmrl.common.registry import registry
from llmrl.common.threads import TorchThreads, job_threads, torch_thread_count
from llmrl.recipes.ellm.intrinsic import (
    CONDITIONING,
    CRAFTER,
    CRAFTER_TASKS,
    HOUSEKEEP,
    LLM_SUGGESTERS,
    METHODS,
    EnvProfile,
    IntrinsicRewardWrapper,
    NoReward,
    NoveltySource,
    SuggestionSource,
    profile_of,
)
from llmrl.recipes.ellm.ppo import EllmPpoSettings, rollout_sizes
from llmrl.recipes.ellm.reward import DEFAULT_THRESHOLD, CachedEmbedder, SuggestionReward

ALGORITHM = "dqn-ellm"  # a registered learner algorithm (llmrl.learner.algorithms)
AGENTS = ("dqn", "ppo")  # dqn: dqn-ellm; ppo: Stable-Baselines3 PPO (`ppo.py`)
EPISODES_FILE = "episodes.jsonl"
EARLY_FRACTION = 0.1  # the caption cache hit rate is reported after this share of the frames
# the fine-tuning tasks and what pays each: Crafter's (the names, an achievement) and
# Housekeep's ("tidy": the increase in correctly placed objects)
TASKS = {**CRAFTER_TASKS, **HOUSEKEEP.tasks}


# dqn-ellm settings a training job sets from its own fields (or the learner's configuration)
JOB_OWNED_DQN_SETTINGS = {
    "seed",
    "total_timesteps",
    "tensorboard_dir",
    "address",
    "num_envs",
    "keys",
}
# dqn-ellm settings that act on the whole process: the learner service owns its threads
PROCESS_SETTINGS = {"torch_threads"}
# the gateway ledger's keys: a job bills its own run and tags under "ellm"; run ids as the
# gateway's names (llm_gateway.names: letters, digits, '_', '.', '-'; no '..')
TAG_ROOT = "ellm"
MAX_BUFFER_SIZE = 10_000_000  # transitions: a replay buffer bounded in memory


class EllmEnvSettings(BaseModel):
    """How the agent's vector env and its reward are built (shared by training and evaluation)."""

    model_config = ConfigDict(extra="forbid")

    env: str = Field(..., description="registered CrafterText-like env id")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="the env's settings")
    num_envs: int = Field(8, ge=1, le=256, description="envs stepped together")
    method: Literal[METHODS] = Field(..., description="the intrinsic reward")  # type: ignore[valid-type]
    suggester: Literal[LLM_SUGGESTERS] = Field(  # type: ignore[valid-type]
        "llm-score", description="the LLM suggester of the method `ellm`"
    )
    model: str = Field("smollm2", description="gateway model of the LLM suggester")
    embed_model: str | None = Field(None, description="gateway embedding model (None: default)")
    threshold: float = Field(
        DEFAULT_THRESHOLD, ge=0, le=1, description="cosine similarity that pays"
    )
    conditioning: Literal[CONDITIONING] = Field("none")  # type: ignore[valid-type]
    intrinsic_scale: float = Field(1.0, ge=0, description="weight of the intrinsic reward")
    extrinsic_scale: float = Field(0.0, ge=0, description="weight of crafter's own reward")
    task: str | None = Field(None, description="fine-tuning task paying 1 (None: no task)")

    @field_validator("task")
    @classmethod
    def _task_is_known(cls, value: str | None) -> str | None:
        if value is not None and value not in TASKS:
            raise ValueError(f"unknown fine-tune task {value!r}; tasks: {', '.join(TASKS)}")
        return value

    seed: Seed = 0
    run_id: str = Field("default", description="the run LLM calls are billed to")
    tag: str = Field(TAG_ROOT, description="the ledger tag of the LLM calls (ellm or ellm/...)")

    @field_validator("run_id")
    @classmethod
    def _run_id_is_a_name(cls, value: str) -> str:
        from llmrl.common.names import is_safe_name

        if not is_safe_name(value):
            raise ValueError(
                "expected a run id (1-128 letters, digits, '_', '.', '-'; no '..'), "
                f"got {value[:200]!r}"
            )
        return value

    @field_validator("tag")
    @classmethod
    def _tag_is_ellms(cls, value: str) -> str:
        from llmrl.common.names import is_safe_name

        parts = value.split("/")
        if parts[0] != TAG_ROOT or len(value) > 200 or not all(map(is_safe_name, parts)):
            raise ValueError(
                f"expected {TAG_ROOT!r} or '{TAG_ROOT}/<part>/...' (parts of letters, digits, "
                f"'_', '.', '-'; at most 200 characters), got {value[:200]!r}"
            )
        return value

    @property
    def reward_method(self) -> str:
        """The method whose intrinsic reward the env computes: "none" when none of it reaches
        the agent (weighed 0 and no goal in the observation: fine-tuning on the task alone),
        so that ELLM's suggester is not asked for an answer multiplied by 0."""
        if self.intrinsic_scale == 0 and self.conditioning == "none":
            return "none"
        return self.method


class EllmTrainingJob(EllmEnvSettings):
    """Everything needed to pretrain or fine-tune one ELLM agent anywhere."""

    kind: Literal["ellm"] = Field("ellm", description="the learner's policy job kind")
    frames: int = Field(..., ge=1, description="frames to train for (env steps, all envs)")
    agent: Literal[AGENTS] = Field("dqn", description="dqn (dqn-ellm) or ppo (SB3 PPO)")  # type: ignore[valid-type]
    dqn: dict[str, Any] = Field(default_factory=dict, description="dqn-ellm settings")
    ppo: EllmPpoSettings = Field(
        default_factory=EllmPpoSettings, description="SB3 PPO settings (n_steps, learning_rate...)"
    )
    checkpoint_every: int | None = Field(
        None, ge=1, description="PPO: frames between checkpoints (dqn: dqn.checkpoint_every)"
    )
    model_path: str = Field(..., description="the checkpoint line (a directory)")
    init_from: str | None = Field(None, description="a pretrained checkpoint to fine-tune")
    torch_threads: TorchThreads = None
    tensorboard_dir: str | None = None
    simulator: str | None = Field(None, description="simulator address; None: in-process")
    llm_gateway: str | None = Field(None, description="gateway address; None: in-process")

    _init_from_confined = field_validator("init_from")(confined_field)

    @field_validator("dqn")
    @classmethod
    def _dqn_settings_are_known(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Checked when the job is parsed (a 422 naming `dqn.<key>`), not when it runs: the
        keys the job sets itself are refused, the rest go through dqn-ellm's own checks."""
        from llmrl.learner.algorithms.base import settings_error
        from llmrl.recipes.ellm.dqn import DqnEllmConfig

        known = set(DqnEllmConfig.model_fields) - JOB_OWNED_DQN_SETTINGS - PROCESS_SETTINGS
        for key in value:
            if key in PROCESS_SETTINGS:
                raise ValueError(
                    f"dqn.{key}: not a job's setting: it would change the threads of the whole "
                    "learner process, which sets its own (OMP_NUM_THREADS on the learner)"
                )
            if key not in known:
                raise ValueError(
                    f"dqn.{key}: not a dqn-ellm setting a job may set; known: "
                    f"{', '.join(sorted(known))}"
                )
        if value.get("buffer_size", 0) > MAX_BUFFER_SIZE:
            raise ValueError(f"dqn.buffer_size: at most {MAX_BUFFER_SIZE:,} transitions")
        try:
            DqnEllmConfig.model_validate(value)
        except ValidationError as error:
            raise ValueError(settings_error(DqnEllmConfig, error, "dqn.")) from None
        return value

    @model_validator(mode="after")
    def _settings_of_its_own_agent(self) -> EllmTrainingJob:
        """The other agent's settings would be ignored without a word: refuse them."""
        if self.agent == "ppo" and self.dqn:
            raise ValueError(
                f"dqn: dqn-ellm settings ({', '.join(sorted(self.dqn))}) with agent 'ppo'; "
                "PPO takes its settings under ppo"
            )
        if self.agent == "dqn" and self.ppo.model_fields_set:
            raise ValueError(
                f"ppo: PPO settings ({', '.join(sorted(self.ppo.model_fields_set))}) with agent "
                "'dqn'; dqn-ellm takes its settings under dqn"
            )
        if self.agent == "dqn" and self.checkpoint_every is not None:
            raise ValueError(
                "checkpoint_every: PPO's setting; with agent 'dqn' set dqn.checkpoint_every"
            )
        if self.agent == "ppo":
            rollout_sizes(self.ppo, self.frames, self.num_envs)
        return self


class _Scaled:
    """A reward source whose intrinsic reward is multiplied by `scale` (0 when fine-tuning
    keeps a goal-conditioned agent's observations but not its intrinsic reward)."""

    def __init__(self, source: Any, scale: float) -> None:
        self.source, self.scale = source, scale

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)

    def step(
        self, observations: dict[str, np.ndarray], envs: np.ndarray, transitions: list[str]
    ) -> np.ndarray:
        return self.scale * self.source.step(observations, envs, transitions)


def reward_source(
    settings: EllmEnvSettings, llm: Any, described: dict[str, Any], profile: EnvProfile = CRAFTER
) -> Any:
    """The method's reward source for `settings.num_envs` envs."""
    method = settings.reward_method
    if method in ("rnd", "knn"):
        from llmrl.recipes.ellm.novelty import KnnNoveltyReward, RndReward

        novelty = RndReward if method == "rnd" else KnnNoveltyReward
        return NoveltySource(novelty(described, seed=settings.seed), profile.agent_keys)
    if method == "none":
        return NoveltySource(NoReward(), profile.agent_keys)
    if method not in profile.suggesters:
        raise ValueError(
            f"method: {method} has no {profile.name} suggester; methods with suggestions there: "
            f"{', '.join(profile.suggesters)}"
        )
    from llmrl.recipes.ellm.suggesters import make_suggester

    embed = CachedEmbedder(
        lambda texts: llm.embed(
            list(texts), model=settings.embed_model, run_id=settings.run_id, tag=settings.tag
        )
    )
    name = profile.suggesters[method] or settings.suggester
    uses_model = name in (*LLM_SUGGESTERS, HOUSEKEEP.suggesters["ellm"])
    kwargs = {"model": settings.model} if uses_model else {}
    suggester = make_suggester(
        {"name": name, "kwargs": kwargs},
        connect_llm=lambda: llm,
        llm_defaults={"run_id": settings.run_id, "tag": settings.tag},
    )
    rewards = [SuggestionReward(embed, settings.threshold) for _ in range(settings.num_envs)]
    dim = 0 if settings.conditioning == "none" else int(embed(["a goal"]).shape[1])
    return SuggestionSource(
        method, suggester, rewards, embed, settings.conditioning, dim, profile=profile
    )


def make_env(
    settings: EllmEnvSettings, llm: Any = None, simulator: str | None = None
) -> IntrinsicRewardWrapper:
    """The agent's vector env: a world of `num_envs` (at `simulator`, else in-process) under
    the method's reward; `llm`: a gateway client (None: connect in-process)."""
    from llmrl.recipes.ellm.dqn import describe_space
    from llmrl.simulator.client import make_world
    from llmrl.simulator.vector import WorldVectorEnv

    world = make_world(
        settings.env, settings.num_envs, settings.seed, simulator, **settings.env_kwargs
    )
    try:
        profile = profile_of(world.observation_space, settings.env)
        if settings.task is not None and settings.task not in profile.tasks:
            raise ValueError(
                f"task: {settings.task!r} is no {profile.name} task; tasks: "
                f"{', '.join(profile.tasks)}"
            )
        vector = WorldVectorEnv(world, keys=profile.world_keys)
        numeric = {key: world.observation_space[key] for key in profile.agent_keys}
        from gymnasium import spaces

        described = describe_space(spaces.Dict(numeric), profile.embed_keys)
        if llm is None and settings.reward_method not in ("rnd", "knn", "none"):
            from llmrl.llm_gateway.client import connect

            llm = connect()
        source = reward_source(settings, llm, described, profile)
        if settings.intrinsic_scale != 1.0:
            source = _Scaled(source, settings.intrinsic_scale)
        return IntrinsicRewardWrapper(
            vector,
            source,
            extrinsic_scale=settings.extrinsic_scale,
            task=settings.task,
            embedding_dim=getattr(source, "embedding_dim", 0),
            profile=profile,
        )
    except BaseException:
        world.close()
        raise


def read_episodes(line: str | Path) -> list[dict[str, Any]]:
    path = Path(line) / EPISODES_FILE
    if not path.is_file():
        return []
    episodes = []
    for text in path.read_text().splitlines():
        try:
            episodes.append(json.loads(text))
        except json.JSONDecodeError:  # a line torn by a killed job: that episode is lost
            continue
    return episodes


def _drop_episodes_after(line: Path, frames: int) -> None:
    """A resumed job forgets the episodes logged after its latest version. The file is
    replaced whole (a temporary file, then `os.replace`): a kill mid-way leaves the old one."""
    kept = [e for e in read_episodes(line) if e["frames"] <= frames]
    path = line / EPISODES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(prefix=f".{EPISODES_FILE}.", dir=path.parent)
    temporary = Path(name)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write("".join(json.dumps(e) + "\n" for e in kept))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


@registry.register_policy_job("ellm", request=EllmTrainingJob)
def train_ellm(
    job: EllmTrainingJob, on_progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Pretrain or fine-tune with dqn-ellm; resumes the line where a killed job left it.
    Returns the checkpoint, the frames done, the suggesters' counters and the timings."""
    from llmrl.learner.versions import Versions

    line = Versions(job.model_path)
    if line.versions():  # going on in another agent's line would count its frames as done
        from llmrl.recipes.ellm.ppo import ALGORITHM as PPO_ALGORITHM

        algorithm = PPO_ALGORITHM if job.agent == "ppo" else ALGORITHM
        if line.latest().algorithm != algorithm:
            raise ValueError(
                f"model_path: {line.root} holds {line.latest().algorithm} versions; agent "
                f"{job.agent} ({algorithm}) needs a line of its own"
            )
    done = int(line.latest().result.get("global_step", 0)) if line.versions() else 0
    _drop_episodes_after(line.root, done)
    llm = None
    if job.reward_method not in ("rnd", "knn", "none"):
        from llmrl.llm_gateway.client import connect

        llm = connect(job.llm_gateway)
    envs = make_env(job, llm, job.simulator)
    log_file = (line.root / EPISODES_FILE).open("a")
    # the counters when 10% of the frames were done (the cache hit rate "after warm-up")
    warm_up = EARLY_FRACTION * job.frames
    early: dict[str, float] | None = envs.counters() if done >= warm_up else None

    def on_step(frames: int, infos: dict[str, Any]) -> None:
        nonlocal early
        for episode in infos.get("episodes", []):
            log_file.write(json.dumps({"frames": frames, **episode}) + "\n")
        if infos.get("episodes"):
            log_file.flush()
        if early is None and frames >= warm_up:
            early = envs.counters()

    try:
        with job_threads(job.torch_threads):  # the same on the learner as embedded
            if job.agent == "ppo":
                from llmrl.recipes.ellm.ppo import CHECKPOINT_EVERY, train_ppo_ellm

                checkpoint = train_ppo_ellm(
                    envs,
                    line,
                    total_timesteps=job.frames,
                    seed=job.seed,
                    tensorboard_dir=job.tensorboard_dir,
                    init_from=job.init_from,
                    checkpoint_every=job.checkpoint_every or CHECKPOINT_EVERY,
                    on_progress=on_progress,
                    on_step=on_step,
                    ppo=job.ppo,
                )
            else:
                checkpoint = registry.get_algorithm(ALGORITHM).train(
                    envs,
                    line,
                    on_progress=on_progress,
                    on_step=on_step,
                    init_from=job.init_from,
                    total_timesteps=job.frames,
                    seed=job.seed,
                    tensorboard_dir=job.tensorboard_dir,
                    **job.dqn,
                )
            threads = torch_thread_count()
    finally:
        log_file.close()
        envs.close()
    counters = envs.counters()
    return {
        "checkpoint": str(checkpoint.path),
        "frames": int(checkpoint.result.get("global_step", 0)),
        "gradient_steps": int(checkpoint.result.get("gradient_steps", 0)),
        "counters": counters,
        "counters_after_warm_up": {k: v - (early or {}).get(k, 0.0) for k, v in counters.items()},
        "timings": envs.timings(),
        "torch_threads": threads,  # what it trained on, here or on the learner
    }


def evaluate_agent(
    settings: EllmEnvSettings,
    checkpoint: str | Path,
    episodes: int,
    epsilon: float = 0.05,
    llm: Any = None,
    simulator: str | None = None,
    on_episode: Callable[[dict[str, Any]], None] | None = None,
    agent: str = "dqn",
) -> list[dict[str, Any]]:
    """`episodes` episodes of the checkpoint's policy (epsilon-greedy, seeded; PPO samples its
    own policy) in the method's env (goal-conditioned agents see their suggestions); each
    episode's figures."""
    if agent == "ppo":
        from llmrl.recipes.ellm.ppo import load_policy

        policy = load_policy(checkpoint)
    else:
        from llmrl.learner.algorithms import load_cached

        policy = load_cached(ALGORITHM, checkpoint)
    envs = make_env(settings, llm, simulator)
    rng = np.random.default_rng(settings.seed)
    finished: list[dict[str, Any]] = []
    try:
        observations, _ = envs.reset(seed=settings.seed)
        while len(finished) < episodes:
            actions = policy.act(observations, epsilon=epsilon, rng=rng)
            observations, _, _, _, infos = envs.step(actions)
            for episode in infos["episodes"]:
                if len(finished) < episodes:
                    finished.append(episode)
                    if on_episode is not None:
                        on_episode(episode)
    finally:
        envs.close()
    return finished
