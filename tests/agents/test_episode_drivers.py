"""Policy kinds are entries of the one registry: the shared and the recipes' kinds are listed,
a kind registered out of tree (as a plugin's would be) plays through `run_episode`, and an
unknown kind is an error naming the known ones."""

from __future__ import annotations

from typing import Any

import pytest
import support.tiny_corridor  # noqa: F401  (registers TinyCorridor, the env played here)

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources, run_episode
from llmrl.agents.planner_driver import planner_driver
from llmrl.common.episodes import EpisodeRecord
from llmrl.common.registry import registry

RIGHT = 1  # TinyCorridor's low-level action "one cell right"


class AlwaysRight(EpisodeDriver):
    """Walks the corridor with low-level actions, recording the position after each step."""

    record_observations = ("position",)

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        return Decision(action=RIGHT, info={"seen": observation["text"]})


@registry.register_driver("test-always-right")
def always_right(policy: dict[str, Any], resources: RolloutResources, job: EpisodeJob) -> Any:
    return AlwaysRight()


def play(policy: dict[str, Any], length: int = 3) -> EpisodeRecord:
    job = EpisodeJob(
        "drivers", "test/0", "TinyCorridor", seed=0, policy=policy, env_kwargs={"length": length}
    )
    resources = RolloutResources()
    try:
        return run_episode(job, resources)
    finally:
        resources.close()


def test_shared_and_recipe_kinds_are_registry_entries():
    kinds = registry.names("driver")
    assert {"planner", "housekeep-planner", "housekeep-demonstration", "when2ask", "sb3"} <= set(
        kinds
    )
    assert registry.get_driver("planner") is planner_driver


def test_a_registered_kind_plays_through_the_one_loop():
    record = play({"kind": "test-always-right"})
    assert [step.action for step in record.steps] == [RIGHT] * 3
    assert [step.info["position"] for step in record.steps] == [1, 2, 3]
    assert record.steps[0].info["seen"] == "You are at cell 0 of 3."
    assert record.metrics["position"] == 3.0 and record.metrics["stop_terminated"] == 1.0
    assert record.success and record.length == 3 and record.policy == "test-always-right"


def test_a_spec_without_kind_is_played_by_the_planner_kind():
    record = play({"name": "oracle"})
    assert [step.skill for step in record.steps] == ["step right"] * 3 and record.success


def test_an_unknown_kind_names_the_known_kinds():
    with pytest.raises(ValueError, match=r"unknown policy kind 'magic'; known kinds: .*planner"):
        play({"kind": "magic"})
