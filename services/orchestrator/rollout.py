"""Episode execution: one function, `run_episode`, used by the embedded runner and rollout workers.

An episode job (`EpisodeJob`) names everything needed to play one episode anywhere: the
environment and its kwargs, the seed, and the policy spec. A policy spec is a small dict,
`{"kind": "planner", "name": "oracle", "kwargs": {...}}`, turned into an `EpisodeDriver` by the
builder registered for its kind (`register_driver`); recipes with their own way of acting
(e.g. a mediator that decides when to ask a planner) register another kind.

The loop steps a one-env world (simulator worlds: in-process or over gRPC, same API) until the
environment ends the episode, the driver stops, or `max_steps` is reached, and returns an
`EpisodeRecord` with every step and every LLM call. Success is the environment's `success`
observation where it has one, else "terminated with a positive final reward" (MiniGrid's
convention).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from llmrl.common.episodes import EpisodeRecord, LlmCall, StepRecord

if TYPE_CHECKING:
    from llmrl.planners.base import Planner

FIRST, MID, LAST = 0, 1, 2
SKILL_RUNNING, SKILL_INFEASIBLE = 1, 3
HARD_STEP_CAP = 100_000  # a safety net for drivers that never stop on envs without a time limit
REPLAN_ATTEMPTS = 3
WORLD_ENTRIES = ("reward", "discount", "step_type")


@dataclass
class EpisodeJob:
    run_id: str
    episode_id: str  # "<phase>/<index>", deterministic: re-running a phase finds it stored
    env: str
    seed: int
    policy: dict[str, Any]  # {"kind": ..., "name": ..., "kwargs": {...}}
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeJob:
        return cls(**data)

    @property
    def policy_name(self) -> str:
        return str(self.policy.get("name") or self.policy.get("kind"))


@dataclass
class Decision:
    """What a driver does at one step: a low-level action, a skill, or stop."""

    action: int | None = None
    skill: str | None = None
    stop: bool = False
    llm_calls: list[LlmCall] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


class EpisodeDriver:
    """Chooses what to do from one env's observation; one instance per episode."""

    # Entries the driver cannot do without (privileged ones included) and entries it uses
    # where the environment has them; reward, discount and step_type always come.
    observations: tuple[str, ...] = ()
    optional_observations: tuple[str, ...] = ("text", "skill_status", "success")
    # Entries copied into every `StepRecord.info` after its step and, as numbers, the last
    # observation's into `EpisodeRecord.metrics` (e.g. the counters an annotator scores).
    record_observations: tuple[str, ...] = ()

    def reset(self) -> None:
        pass

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        raise NotImplementedError


@dataclass
class RolloutResources:
    """What a process that plays episodes holds: a world per environment, an LLM client.

    `simulator` None plays in-process worlds and `llm_gateway` None uses an in-process gateway
    (embedded mode); the gateway client is only connected when a driver needs it.
    """

    simulator: str | None = None
    llm_gateway: str | None = None
    world_factory: Callable[..., Any] | None = None  # default: llmrl.simulator.client.make_world
    _worlds: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _llm: Any = None

    @property
    def llm(self) -> Any:
        """The LLM gateway client (contract 3), connected on first use."""
        with self._lock:
            if self._llm is None:
                try:
                    from llmrl.llm_gateway.client import connect
                except ModuleNotFoundError as exc:
                    raise RuntimeError(f"the LLM gateway client is not available: {exc}") from exc
                self._llm = connect(self.llm_gateway)
            return self._llm

    def world(self, env: str, env_kwargs: dict[str, Any]) -> Any:
        key = json.dumps([env, env_kwargs], sort_keys=True)
        with self._lock:
            if key not in self._worlds:
                factory = self.world_factory or _default_world_factory()
                self._worlds[key] = factory(env, num_envs=1, address=self.simulator, **env_kwargs)
            return self._worlds[key]

    def drop_world(self, env: str, env_kwargs: dict[str, Any]) -> None:
        """Forget a world after an error (e.g. the simulator restarted); closes it if it can."""
        key = json.dumps([env, env_kwargs], sort_keys=True)
        with self._lock:
            world = self._worlds.pop(key, None)
        if world is not None:
            with contextlib.suppress(Exception):  # best effort on an already broken world
                world.close()

    def close(self) -> None:
        with self._lock:
            worlds, self._worlds = list(self._worlds.values()), {}
            llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()
        for world in worlds:
            with contextlib.suppress(Exception):  # closing what may already be gone
                world.close()


def _default_world_factory() -> Callable[..., Any]:
    from llmrl.simulator.client import make_world

    return make_world


# -- drivers ----------------------------------------------------------------------------
DriverBuilder = Callable[[dict[str, Any], RolloutResources, EpisodeJob], EpisodeDriver]
_DRIVERS: dict[str, DriverBuilder] = {}


def register_driver(kind: str) -> Callable[[DriverBuilder], DriverBuilder]:
    """Register how policy specs of `kind` become drivers (one builder per kind)."""

    def decorator(builder: DriverBuilder) -> DriverBuilder:
        _DRIVERS[kind] = builder
        return builder

    return decorator


def driver_kinds() -> list[str]:
    """Every registered policy kind (recipes' own kinds included)."""
    from llmrl.common.registry import registry

    registry.load_builtins("recipe")
    return sorted(_DRIVERS)


def make_driver(policy: dict[str, Any], resources: RolloutResources, job: EpisodeJob) -> Any:
    kind = policy.get("kind", "planner")
    if kind not in _DRIVERS:  # recipes register their kinds when imported: import them all
        from llmrl.common.registry import registry

        registry.load_builtins("recipe")
    if kind not in _DRIVERS:
        known = ", ".join(sorted(_DRIVERS))
        raise ValueError(f"unknown policy kind {kind!r}; known kinds: {known}")
    return _DRIVERS[kind](policy, resources, job)


class PlannerDriver(EpisodeDriver):
    """Plays a skill environment by following a planner's plans, re-planning when they run out.

    A skill is repeated while the environment reports it RUNNING; when it is DONE the next
    skill of the plan follows; when it is INFEASIBLE the rest of the plan is dropped and the
    planner asked again. A planner that gives no skills `REPLAN_ATTEMPTS` times in a row (or
    says it is done) ends the episode.
    """

    def __init__(self, planner: Any) -> None:
        self.planner = planner
        self.observations = tuple(planner.observations)
        self._queue: list[str] = []
        self._current: str | None = None

    def reset(self) -> None:
        self.planner.reset()
        self._queue, self._current = [], None

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        status = int(observation.get("skill_status", 0))
        if self._current is not None and status == SKILL_RUNNING:
            return Decision(skill=self._current)
        if status == SKILL_INFEASIBLE:
            self._queue.clear()
        self._current = None
        calls: list[LlmCall] = []
        for _ in range(REPLAN_ATTEMPTS):
            if self._queue:
                break
            plan = self.planner.plan(observation, t)
            calls.extend(plan.llm_calls)
            if plan.done:
                return Decision(stop=True, llm_calls=calls, info={"stop": "planner done"})
            self._queue = [skill for skill in plan.skills if skill]
        if not self._queue:
            return Decision(stop=True, llm_calls=calls, info={"stop": "empty plan"})
        self._current = self._queue.pop(0)
        return Decision(skill=self._current, llm_calls=calls)


def build_planner(
    policy: dict[str, Any], resources: Any, job: EpisodeJob, **llm_defaults: Any
) -> Planner:
    """The registered planner a policy spec names, with its kwargs; LLM planners also get the
    gateway client (`llm`), the run to bill (`run_id`) and `llm_defaults` unless given."""
    from llmrl.common.registry import registry

    planner_cls = registry.get_planner(policy["name"])
    kwargs = dict(policy.get("kwargs", {}))
    if getattr(planner_cls, "uses_llm", False):
        kwargs.setdefault("llm", resources.llm)
        kwargs.setdefault("run_id", job.run_id)
        for key, value in llm_defaults.items():
            kwargs.setdefault(key, value)
    return planner_cls(**kwargs)


@register_driver("planner")
def _planner_driver(
    policy: dict[str, Any], resources: RolloutResources, job: EpisodeJob
) -> PlannerDriver:
    return PlannerDriver(build_planner(policy, resources, job))


# -- the episode loop ---------------------------------------------------------------------
def _first(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """Env 0's entries of a batched observation, as plain Python values."""
    single = {}
    for name, value in batch.items():
        item = value[0] if isinstance(value, np.ndarray) and value.ndim >= 1 else value
        single[name] = item.item() if isinstance(item, np.generic) else item
    return single


def _recorded(observation: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The entries `names` of one env's observation that it has, as JSON-ready values."""
    recorded = {}
    for name in names:
        if name in observation:
            value = observation[name]
            recorded[name] = value.tolist() if isinstance(value, np.ndarray) else value
    return recorded


def run_episode(job: EpisodeJob, resources: RolloutResources) -> EpisodeRecord:
    """Play one episode of `job` and return its record (the one rollout loop of llmrl)."""
    driver = make_driver(job.policy, resources, job)
    world = resources.world(job.env, job.env_kwargs)
    available = world.observation_space.spaces
    observations = list(
        dict.fromkeys(
            [
                *driver.observations,
                *(name for name in driver.optional_observations if name in available),
                *(name for name in driver.record_observations if name in available),
                *WORLD_ENTRIES,
            ]
        )
    )
    record = EpisodeRecord(
        run_id=job.run_id,
        episode_id=job.episode_id,
        env=job.env,
        seed=job.seed,
        policy=job.policy_name,
    )
    driver.reset()
    obs = _first(world.reset(seed=job.seed, observations=observations))
    limit = min(job.max_steps or HARD_STEP_CAP, HARD_STEP_CAP)
    t, terminated, last_reward = 0, False, 0.0
    stop_reason = "max_steps"
    while t < limit:
        decision = driver.act(obs, t)
        for call in decision.llm_calls:
            call.t = t
        record.llm_calls.extend(decision.llm_calls)
        if decision.stop:
            stop_reason = str(decision.info.get("stop", "driver"))
            break
        step = StepRecord(t=t, text=obs.get("text"), action=decision.action, skill=decision.skill)
        batch = world.step(
            action=None if decision.action is None else np.array([decision.action]),
            skill=None if decision.skill is None else [decision.skill],
            observations=observations,
        )
        obs = _first(batch)
        step.reward = float(obs["reward"])
        if "skill_status" in obs:
            step.info["skill_status"] = int(obs["skill_status"])
        step.info.update(decision.info)
        step.info.update(_recorded(obs, driver.record_observations))
        record.steps.append(step)
        record.episode_return += step.reward
        last_reward = step.reward
        t += 1
        if int(obs["step_type"]) == LAST:
            terminated = float(obs["discount"]) == 0.0
            stop_reason = "terminated" if terminated else "truncated"
            break
    record.length = t
    if "success" in obs:
        record.success = bool(obs["success"])
    else:
        record.success = terminated and last_reward > 0
    for name, value in _recorded(obs, driver.record_observations).items():
        if isinstance(value, (int, float)):
            record.metrics[name] = float(value)
    calls = record.llm_calls
    record.metrics.update(
        {
            "llm_calls": float(len(calls)),
            "llm_tokens": float(sum(c.prompt_tokens + c.completion_tokens for c in calls)),
            "llm_cost_usd": float(sum(c.cost_usd for c in calls)),
            "llm_cached_calls": float(sum(1 for c in calls if c.cached)),
        }
    )
    record.metrics["stop_" + stop_reason.replace(" ", "_")] = 1.0
    return record
