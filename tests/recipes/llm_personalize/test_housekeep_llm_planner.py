"""The Housekeep LLM planner and its executor: plans parsed into skills, every unparsable or
infeasible line a charged failure, re-prompting when a plan runs out, "mission complete"
ending the episode; through a real gateway (a scripted chat server) and real worlds."""

from __future__ import annotations

from support.tiny_llm import tiny_gateway_settings

from llmrl.agents import EpisodeJob, RolloutResources, run_episode
from llmrl.llm_gateway.client import connect
from llmrl.planners.base import make_planner
from llmrl.recipes.llm_personalize.datasets import score_queries
from llmrl.recipes.llm_personalize.driver import POLICY_KIND
from llmrl.simulator.envs.housekeep import HousekeepEnv
from llmrl.simulator.envs.housekeep.skills import MISSION_COMPLETE, parse_skill

NONE, DONE, INFEASIBLE = 0, 2, 3  # a charged non-skill line is a low-level step: NONE
SEED = 7


def house_rooms(seed: int) -> list[str]:
    env = HousekeepEnv()
    env.reset(seed=seed)
    return list(env.house.rooms)


def play(client, policy_kwargs=None, max_steps: int = 20):
    job = EpisodeJob(
        run_id="test", episode_id="evaluate/0", env="Housekeep", seed=SEED,
        policy={"kind": POLICY_KIND, "name": "housekeep-llm",
                "kwargs": {"model": "scripted", **(policy_kwargs or {})}},
        env_kwargs={"max_steps": max_steps},
    )  # fmt: skip
    resources = RolloutResources(_llm=client)
    try:
        return run_episode(job, resources)
    finally:
        for world in resources._worlds.values():
            world.close()


def test_plans_are_executed_line_by_line_with_failures_charged(scripted):
    script, client = scripted
    first, second = house_rooms(SEED)[:2]
    script.answers = [
        f"1. go to room {first}\n2. dance wildly\n3. pick up ghost_1",  # no end: re-prompt
        "",  # an empty answer: one failed step
        f"1. Go to the room {second}.\n2. mission complete\n3. go to room {first}",
    ]
    record = play(client)
    assert [c.t for c in record.llm_calls] == [0, 3, 4]
    assert [s.skill for s in record.steps] == [
        f"go to room {first}", None, "pick up ghost_1", None, f"go to room {second}",
        MISSION_COMPLETE,
    ]  # fmt: skip
    assert [s.info["skill_status"] for s in record.steps] == [
        DONE, NONE, INFEASIBLE, NONE, DONE, DONE
    ]  # fmt: skip
    assert record.steps[1].info["not_a_skill"] == "2. dance wildly"
    assert record.steps[3].info["not_a_skill"] == ""  # the empty plan's charged step
    assert record.length == 6 and record.metrics["stop_terminated"] == 1.0
    # each step records the counters the annotator scores queries with
    assert [s.info["rooms_explored"] for s in record.steps] == [1, 1, 1, 1, 2, 2]
    assert record.metrics["success_rate"] == 0.0 and "object_success" in record.metrics
    scores = score_queries(record)
    assert [s.successful_skills for s in scores] == [
        [f"go to room {first}"], [], [f"go to room {second}", MISSION_COMPLETE]
    ]  # fmt: skip
    assert [s.receptacles_found > 0 for s in scores] == [True, False, True]
    # every prompt is the Housekeep prompt of the context the planner saw
    assert script.prompts[1][-1]["content"].startswith("Rooms of the house:")
    assert "Last action: pick up ghost_1 (failed" in script.prompts[1][-1]["content"]


def test_the_episode_ends_at_the_step_limit_when_the_model_never_plans(scripted):
    script, client = scripted
    script.answers = ["no idea"] * 10  # one charged line per answer
    record = play(client, max_steps=4)
    assert record.length == 4 and len(record.llm_calls) == 4
    assert record.metrics["stop_truncated"] == 1.0
    assert all(s.skill is None and s.info["not_a_skill"] == "no idea" for s in record.steps)
    assert "Last action: (not a skill) (failed" in script.prompts[-1][-1]["content"]
    assert "Steps left: 1." in script.prompts[-1][-1]["content"]


def test_generic_planner_kind_gets_only_skills(scripted):
    script, client = scripted
    script.answers = ["1. go to room kitchen_0\n2. jump\n3. mission complete"]
    planner = make_planner("housekeep-llm", llm=client, model="scripted")
    plan = planner.plan({"text": "Rooms of the house: kitchen_0."})
    assert plan.skills == ["go to room kitchen_0", MISSION_COMPLETE]
    assert plan.llm_calls[0].info["unparsable"] == ["2. jump"]
    charging = make_planner("housekeep-llm", llm=client, model="scripted", charge_unparsable=True)
    script.answers = ["1. go to room kitchen_0\n2. jump"]
    assert charging.plan({"text": "x"}).skills == ["go to room kitchen_0", "2. jump"]


def test_score_mode_picks_a_feasible_skill_with_a_local_model(tiny_model_dir):
    client = connect(**tiny_gateway_settings(tiny_model_dir))
    try:
        planner = make_planner("housekeep-llm", llm=client, model="tiny", mode="score")
        assert planner.observations == ("text", "feasible_skills")
        feasible = ["go to room kitchen_0", "go to room bedroom_0", MISSION_COMPLETE]
        plan = planner.plan({"text": "Rooms of the house: kitchen_0, bedroom_0.",
                             "feasible_skills": "\n".join(feasible)})  # fmt: skip
        assert len(plan.skills) == 1 and plan.skills[0] in feasible
        scores = plan.llm_calls[0].info["candidates"]
        assert plan.skills[0] == max(scores, key=scores.get)
    finally:
        client.close()


def test_guided_plans_only_name_what_the_agent_knows(tiny_model_dir):
    """A random tiny model writes garbage freely; guided, every line is a known skill."""
    client = connect(**tiny_gateway_settings(tiny_model_dir))
    try:
        kwargs = {"model": "tiny", "max_tokens": 96, "guided_max_lines": 3}
        free = play(client, {**kwargs, "guided": False}, max_steps=6)
        assert any(s.skill is None for s in free.steps)  # the free model's lines are no skills
        record = play(client, {**kwargs, "guided": True}, max_steps=6)
    finally:
        client.close()
    assert record.llm_calls and all(call.info["guided"] for call in record.llm_calls)
    env = HousekeepEnv()
    env.reset(seed=SEED)
    names = {*env.house.rooms, *(r.name for r in env.house.receptacles)}
    names |= {o.name for o in env.house.objects}
    for step in record.steps:
        assert step.skill is not None, step.info  # no charged non-skill line
        skill = parse_skill(step.skill)
        assert set(skill.args) <= names, step.skill
    for call in record.llm_calls:
        assert 1 <= len(call.parsed) + int(call.info["done"]) <= 3
