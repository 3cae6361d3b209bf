"""What an episode job is, what a driver decides at each step, and how a policy spec becomes one.

An episode job (`EpisodeJob`) names everything needed to play one episode anywhere: the
environment and its kwargs, the seed, and the policy spec. A policy spec is a small dict,
`{"kind": "planner", "name": "oracle", "kwargs": {...}}`, turned into an `EpisodeDriver` by the
builder registered for its kind (`@registry.register_driver(kind)`, looked up by `make_driver`);
recipes with their own way of acting (e.g. a mediator that decides when to ask a planner)
register another kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from llmrl.agents.policy_spec import PolicySpec, parse_policy_spec
from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registry

if TYPE_CHECKING:
    from llmrl.agents.resources import RolloutResources


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


# A low-level action: an index (Discrete action spaces) or a vector of floats (Box).
Action = int | Sequence[float]


@dataclass
class Decision:
    """What a driver does at one step: a low-level action, a skill, or stop."""

    action: Action | None = None
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
    # Entries needed only at some steps (a planner's privileged inputs, read when it is
    # queried), which a world may spend a search on: the rollout loop requests them at
    # reset only, and the driver reads them as the env stands with `look` when it needs them.
    on_demand_observations: tuple[str, ...] = ()
    _looker: Callable[[Sequence[str]], dict[str, Any]] | None = None

    def reset(self) -> None:
        pass

    def bind_look(self, looker: Callable[[Sequence[str]], dict[str, Any]]) -> None:
        """Called by the rollout loop: how `look` reads the env it plays."""
        self._looker = looker

    def look(self, names: Sequence[str]) -> dict[str, Any]:
        """The entries `names` as the env stands now, without stepping it. Unbound (a driver
        fed by hand) it reads nothing: the observations passed to `act` must hold them."""
        return {} if self._looker is None else self._looker(names)

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        raise NotImplementedError


# How policy specs of one kind become drivers: build(spec, resources, job) -> driver.
DriverBuilder = Callable[[PolicySpec, "RolloutResources", EpisodeJob], EpisodeDriver]


def make_driver(
    policy: dict[str, Any] | PolicySpec, resources: RolloutResources, job: EpisodeJob
) -> EpisodeDriver:
    """The driver of a policy spec, by its kind (default "planner"), built for `job` from the
    spec validated against its kind's model (a ValueError naming each bad key)."""
    spec = parse_policy_spec(policy)
    build: DriverBuilder = registry.get_driver(spec.kind)
    return build(spec, resources, job)
