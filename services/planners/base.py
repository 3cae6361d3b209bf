"""What a planner is: something that turns what the agent knows into a plan of skills.

Planners are registered by name (`@registry.register_planner("oracle")`) and built with
`make_planner(name_or_spec, **kwargs)`, the one way every caller (drivers, recipes, tests) makes
one. A planner sees one environment's observation (a dict of that
env's entries, e.g. `text`, plus any privileged entries it lists in `observations`), and may
call a language model through the gateway client it is given; the call is reported in the
returned `Plan` so that episodes record every query.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registry


@dataclass
class Plan:
    skills: list[str]  # skill phrases in order, e.g. ["go to the red key", "pick up the red key"]
    llm_calls: list[LlmCall] = field(default_factory=list)  # the queries it took (re-asks too)
    done: bool = False  # the planner declares the task complete ("mission complete")
    # The probability the planner gave the plan it returned, when it can say (a scoring LLM:
    # its softmax probability of the chosen skill); None when it cannot (scripted planners,
    # generated text). A sampling LLM's errors are mostly its unlikely draws, so a caller can
    # tell a doubtful plan from a sure one without knowing which is right.
    confidence: float | None = None
    # Whether the plan is a deliberate error, from a simulated planner that knows (the noisy
    # oracle); None when the planner cannot know (an LLM). A diagnostic for reports only:
    # callers that decide anything must not read it.
    erred: bool | None = None


class Planner(ABC):
    # Observation entries the planner needs, beyond the text (privileged ones included);
    # callers request exactly these from the simulator.
    observations: ClassVar[tuple[str, ...]] = ("text",)
    uses_llm: ClassVar[bool] = False
    # Whether the planner draws random numbers and takes a `seed` (see `reseeded`).
    seeded: ClassVar[bool] = False

    def reset(self) -> None:  # noqa: B027 - optional hook: new episode
        """Forget anything kept from the previous episode."""

    @abstractmethod
    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        """A plan from one env's observation at step `t`."""


def observation_text(value: Any) -> str:
    """A text entry of an observation as a str (worlds give numpy `<U` scalars or 0-d arrays)."""
    return str(value.item() if hasattr(value, "item") else value)


def make_planner(
    spec: str | Mapping[str, Any],
    /,
    *,
    connect_llm: Callable[[], Any] | None = None,
    llm_defaults: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Planner:
    """The registered planner that `spec` names: a name, or a planner spec `{"name": ...,
    "kwargs": {...}}` (as policy specs carry them); `kwargs` are added to the spec's own.

    A planner that calls a language model (`uses_llm`) also gets, where neither sets them, the
    gateway client `llm` from `connect_llm()` (only called then: scripted planners never
    connect one) and `llm_defaults` (e.g. the run its calls are billed to, `run_id`).
    """
    if isinstance(spec, str):
        name, spec_kwargs = spec, {}
    else:
        if "name" not in spec:
            raise ValueError(f"a planner spec needs a 'name' (a registered planner), got {spec}")
        name, spec_kwargs = str(spec["name"]), dict(spec.get("kwargs") or {})
    planner_cls = registry.get_planner(name)
    arguments = {**spec_kwargs, **kwargs}
    if getattr(planner_cls, "uses_llm", False):
        if "llm" not in arguments and connect_llm is not None:
            arguments["llm"] = connect_llm()
        for key, value in (llm_defaults or {}).items():
            arguments.setdefault(key, value)
    return planner_cls(**arguments)


def reseeded(spec: str | Mapping[str, Any], stream: int) -> str | dict[str, Any]:
    """`spec` with the `seed` of a planner that draws random numbers (`seeded`) mixed with
    `stream` (an episode's or a training env's seed), so that parallel envs and episodes get
    different, reproducible draws; any other planner's spec is returned unchanged."""
    name = spec if isinstance(spec, str) else str(spec.get("name", ""))
    if not getattr(registry.get_planner(name), "seeded", False):
        return spec
    kwargs = {} if isinstance(spec, str) else dict(spec.get("kwargs") or {})
    base = kwargs.get("seed", 0)
    if isinstance(base, bool) or not isinstance(base, int):
        raise ValueError(f"planner.kwargs.seed: expected an integer, got {base!r}")
    kwargs["seed"] = (base * 1_000_003 + int(stream)) % 2**63
    return {"name": name, "kwargs": kwargs}
