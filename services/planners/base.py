"""What a planner is: something that turns what the agent knows into a plan of skills.

Planners are registered by name (`@registry.register_planner("oracle")`) and built with
`make_planner(name, **kwargs)`. A planner sees one environment's observation (a dict of that
env's entries, e.g. `text`, plus any privileged entries it lists in `observations`), and may
call a language model through the gateway client it is given; the call is reported in the
returned `Plan` so that episodes record every query.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registry


@dataclass
class Plan:
    skills: list[str]  # skill phrases in order, e.g. ["go to the red key", "pick up the red key"]
    llm_calls: list[LlmCall] = field(default_factory=list)  # the queries it took (re-asks too)
    done: bool = False  # the planner declares the task complete ("mission complete")


class Planner(ABC):
    # Observation entries the planner needs, beyond the text (privileged ones included);
    # callers request exactly these from the simulator.
    observations: ClassVar[tuple[str, ...]] = ("text",)
    uses_llm: ClassVar[bool] = False

    def reset(self) -> None:  # noqa: B027 - optional hook: new episode
        """Forget anything kept from the previous episode."""

    @abstractmethod
    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        """A plan from one env's observation at step `t`."""


def observation_text(value: Any) -> str:
    """A text entry of an observation as a str (worlds give numpy `<U` scalars or 0-d arrays)."""
    return str(value.item() if hasattr(value, "item") else value)


def make_planner(name: str, **kwargs: Any) -> Planner:
    return registry.get_planner(name)(**kwargs)
