"""When2Ask MiniGrid tasks: knowledge text, skill controllers, oracle, seeding, registration."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from minigrid.core.world_object import Box, Door, Key

import llmrl.simulator.envs  # noqa: F401 - registers the environments
from llmrl.common.registry import registry
from llmrl.simulator.envs.base import InvalidSkillError, SkillStatus, step_skill
from llmrl.simulator.envs.when2ask.env import When2AskEnv
from llmrl.simulator.envs.when2ask.knowledge import object_name
from llmrl.simulator.envs.when2ask.skills import decide, parse_skill

TASKS = ["SimpleDoorKey", "KeyInBox", "RandomBoxKey", "ColoredDoorKey"]
RUNNING, DONE, INFEASIBLE = SkillStatus.RUNNING, SkillStatus.DONE, SkillStatus.INFEASIBLE


def make(task: str = "SimpleDoorKey", **kwargs) -> gym.Env:
    env = gym.make(f"llmrl/{task}-v0", **kwargs)
    env.reset(seed=0)
    return env


def run_skill(env: gym.Env, skill: str, limit: int = 60) -> tuple[SkillStatus, int, dict, float]:
    """Step `skill` until it is no longer running; (status, steps taken, last obs, reward)."""
    start, total = env.unwrapped.step_count, 0.0
    for _ in range(limit):
        obs, reward, terminated, truncated, info = step_skill(env, skill)
        total += reward
        status = info["skill_status"]
        if status != RUNNING or terminated or truncated:
            return status, env.unwrapped.step_count - start, obs, total
    raise AssertionError(f"{skill!r} still running after {limit} steps")


def solve_with_oracle(env: gym.Env, seed: int) -> tuple[bool, int]:
    """Follow the oracle skill by skill, re-reading its plan after each skill."""
    obs, _ = env.reset(seed=seed)
    for _ in range(200):
        skill = obs["oracle_plan"].split("\n")[0]
        assert skill, "the oracle gave up"
        while True:
            obs, reward, terminated, truncated, info = step_skill(env, skill)
            if terminated or truncated:
                return reward > 0, env.unwrapped.step_count
            assert info["skill_status"] != INFEASIBLE, f"oracle skill {skill!r} infeasible"
            if info["skill_status"] == DONE:
                break
    raise AssertionError("too many skills")


SIMPLE = """
#######
#.k.#.#
#...LG#
#^..#.#
#######
"""


def simple_layout(env: gym.Env, art: str = SIMPLE, **legend) -> dict:
    legend = {"k": Key("red"), "L": Door("red", is_locked=True), **legend}
    return env.unwrapped.load_layout(art, legend)


# -- registration and the gymnasium contract ---------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_env_checker_passes(task):
    env = gym.make(f"llmrl/{task}-v0").unwrapped
    check_env(env, skip_render_check=True)


def test_registered_with_registry_and_gymnasium():
    for task in TASKS:
        entry = registry.entry("env", task)
        assert entry.metadata["max_episode_steps"] == 100
        assert "when2ask" in entry.metadata["tags"]
    env = gym.make("llmrl/SimpleDoorKey-v0")
    assert env.spec.max_episode_steps == 100
    assert isinstance(env.unwrapped, When2AskEnv)
    assert env.unwrapped.agent_view_size == 3
    assert env.action_space == gym.spaces.Discrete(6)
    obs, _ = env.reset(seed=3)
    assert obs["image"].shape == (3, 3, 3) and obs["image"].dtype == np.uint8
    assert obs["skill_status"] == SkillStatus.NONE


def test_room_sizes_follow_the_settings():
    env = gym.make("llmrl/SimpleDoorKey-v0", min_room_size=6, max_room_size=7).unwrapped
    sizes = set()
    for seed in range(40):
        env.reset(seed=seed)
        walls = np.argwhere(env.grid.encode()[..., 0] == 2)
        sizes.add((int(walls[:, 0].max()) + 1, int(walls[:, 1].max()) + 1))
    assert {w for w, _ in sizes} == {6, 7} and {h for _, h in sizes} == {6, 7}
    with pytest.raises(ValueError, match="min_room_size"):
        gym.make("llmrl/SimpleDoorKey-v0", min_room_size=4)
    with pytest.raises(ValueError, match="agent_view_size must be odd"):
        gym.make("llmrl/SimpleDoorKey-v0", agent_view_size=4)


def test_same_seed_same_episode_and_different_seeds_differ():
    def rollout(seed: int) -> list:
        env = gym.make("llmrl/RandomBoxKey-v0")
        obs, _ = env.reset(seed=seed)
        trace = [obs["text"], obs["image"].tobytes(), env.unwrapped.grid.encode().tobytes()]
        rng = np.random.default_rng(0)
        for _ in range(30):
            obs, *_ = env.step(int(rng.integers(6)))
            trace += [obs["text"], obs["image"].tobytes(), obs["oracle_plan"]]
        return trace

    assert rollout(5) == rollout(5)
    assert rollout(5) != rollout(6)


def test_low_level_action_out_of_range_is_rejected():
    env = make()
    with pytest.raises(ValueError, match=r"action must be an integer in \[0, 6\)"):
        env.step(6)


# -- text: the agent's knowledge on hand-built grids ---------------------------------------
def test_text_lists_what_was_seen_and_keeps_it():
    env = make()
    obs = simple_layout(env)
    # Facing up from (1, 3): the 3x3 view covers x 0..2, y 1..3, the red key included.
    assert obs["text"] == "You have seen a red key. You carry nothing."
    assert obs["mission"] == "open the locked door with its key and go to the goal"
    assert obs["carrying"].tolist() == [1, 0]
    obs, *_ = env.step(1)  # facing right: x 1..3, y 2..4 in view, the key no more
    assert obs["text"] == "You have seen a red key. You carry nothing."
    obs, *_ = env.step(2)  # at (2, 3): x 2..4 in view, the door at (4, 2) too
    assert obs["text"] == "You have seen a red key, a locked red door. You carry nothing."


def test_text_reports_carried_key_open_door_and_box_contents():
    env = make()
    art = """
#######
#b..#.#
#.>.LG#
#...#.#
#######
"""
    obs = simple_layout(env, art, b=Box("blue", contains=Key("red")))
    assert obs["text"] == "You have seen a locked red door. You carry nothing."
    assert run_skill(env, "explore")[0] == DONE
    assert "a blue box" in env.unwrapped.observe()["text"]
    assert run_skill(env, "go to the blue box")[0] == DONE
    status, steps, obs, _ = run_skill(env, "toggle the blue box")
    assert (status, steps) == (DONE, 1)
    assert obs["text"] == "You have seen a locked red door, a red key. You carry nothing."
    assert run_skill(env, "pick up the red key")[0] == DONE
    obs = env.unwrapped.observe()
    assert obs["text"] == "You have seen a locked red door. You carry a red key."
    assert obs["carrying"].tolist() == [5, 0]  # minigrid codes: key, red
    assert run_skill(env, "go to the red door")[0] == DONE
    status, _, obs, _ = run_skill(env, "toggle the red door")
    assert status == DONE
    assert obs["text"] == "You have seen an open red door, the goal. You carry a red key."


# -- skills on hand-built layouts ---------------------------------------------------------
def test_go_to_pick_up_toggle_and_goal_solve_a_layout():
    env = make()
    simple_layout(env)
    status, steps, obs, _ = run_skill(env, "go to the red key")
    assert status == DONE and 1 <= steps <= 4
    u = env.unwrapped
    assert tuple(u.front_pos) == (2, 1)
    assert run_skill(env, "pick up the red key")[:2] == (DONE, 1)
    assert run_skill(env, "pick up the red key")[:2] == (DONE, 0)  # already holds it
    assert run_skill(env, "go to the red door")[0] == INFEASIBLE  # not seen yet
    status, _, obs, _ = run_skill(env, "explore")
    assert status == DONE and "a locked red door" in obs["text"]
    assert run_skill(env, "go to the red door")[0] == DONE
    assert tuple(u.front_pos) == (4, 2)
    assert run_skill(env, "toggle the red door")[:2] == (DONE, 1)
    assert u.door.is_open
    status, steps, obs, reward = run_skill(env, "go to the goal")
    assert status == DONE and steps == 2 and reward > 0
    assert tuple(u.agent_pos) == u.goal_pos


def test_skill_status_is_reported_in_observation_and_info():
    env = make()
    simple_layout(env)
    obs, _, _, _, info = step_skill(env, "go to the red key")
    assert obs["skill_status"] == info["skill_status"] == RUNNING
    obs, *_ = env.step(0)
    assert obs["skill_status"] == SkillStatus.NONE


def test_infeasible_skills_do_not_step():
    env = make()
    simple_layout(env)
    u = env.unwrapped
    before = (tuple(u.agent_pos), u.agent_dir, u.step_count)
    for skill in (
        "go to the red door",  # not seen yet
        "go to the goal",  # not seen yet
        "pick up the red key",  # seen but not next to the agent
        "toggle the red door",  # not seen
        "pick up the blue key",  # no such key
    ):
        obs, reward, terminated, truncated, info = step_skill(env, skill)
        assert info["skill_status"] == INFEASIBLE, skill
        assert obs["skill_status"] == INFEASIBLE
        assert (reward, terminated, truncated) == (0.0, False, False)
    assert (tuple(u.agent_pos), u.agent_dir, u.step_count) == before


def test_locked_door_needs_the_key_of_its_colour():
    env = make()
    art = """
#######
#..b..#
#..>L.#
#...#G#
#######
"""
    simple_layout(env, art, b=Key("blue"))
    assert run_skill(env, "toggle the red door")[0] == INFEASIBLE
    # Carrying the wrong key is no better.
    assert run_skill(env, "pick up the blue key")[0] == DONE
    assert run_skill(env, "toggle the red door")[0] == INFEASIBLE
    assert not env.unwrapped.door.is_open


def test_pick_up_swaps_a_carried_key_away_from_the_door():
    env = make("ColoredDoorKey")
    art = """
#######
#..r..#
#..>L.#
#..b..#
#######
"""
    # The red key is dropped ahead (not next to the door) once the agent faces up.
    env.unwrapped.load_layout(
        art, {"r": Key("red"), "b": Key("blue"), "L": Door("blue", is_locked=True)}
    )
    assert run_skill(env, "pick up the red key")[0] == DONE
    status, steps, obs, _ = run_skill(env, "pick up the blue key")
    assert status == DONE and obs["carrying"].tolist() == [5, 2]  # key, blue
    assert steps == 4  # drop, turn, turn, pick up
    u = env.unwrapped
    keys = [tuple(int(v) for v in p) for p in np.argwhere(u.grid.encode()[..., 0] == 5)]
    assert keys == [(3, 1)]  # the red key, dropped right ahead, away from the door
    assert obs["text"] == "You have seen a red key, a locked blue door. You carry a blue key."


def test_pick_up_with_no_free_cell_to_drop_into_is_infeasible():
    env = make("ColoredDoorKey")
    art = """
#######
#..#rL#
#..#v##
#..#b##
#######
"""
    env.unwrapped.load_layout(
        art, {"r": Key("red"), "b": Key("blue"), "L": Door("blue", is_locked=True)}
    )
    env.step(0)
    env.step(0)  # turned around: both keys seen
    assert run_skill(env, "pick up the red key")[:2] == (DONE, 1)
    # The red key's old cell is the only free one, and it is next to the door.
    assert run_skill(env, "pick up the blue key")[:2] == (INFEASIBLE, 0)


def test_explore_finds_objects_and_stops_when_all_is_seen():
    env = make()
    art = """
########
#^.....#
#......#
#.....k#
###L####
"""
    obs = simple_layout(env, art)
    assert obs["text"] == "You have seen nothing yet. You carry nothing."
    status, steps, obs, _ = run_skill(env, "explore")
    assert status == DONE and steps > 0
    assert obs["text"] == "You have seen a locked red door. You carry nothing."
    status, steps, obs, _ = run_skill(env, "explore")
    assert status == DONE and steps > 0
    assert obs["text"] == "You have seen a locked red door, a red key. You carry nothing."
    status, steps, obs, _ = run_skill(env, "explore", limit=100)
    assert status == INFEASIBLE  # nothing new to see, and nothing left unseen
    u = env.unwrapped
    interior = [(x, y) for x in range(1, 7) for y in range(1, 4)]
    assert all(u.knowledge.known(x, y) for x, y in interior)
    assert "explore" not in obs["feasible_skills"].split("\n")


def test_a_low_level_action_interrupts_a_skill():
    env = make()
    art = """
########
#......L
#......#
#..^...#
#......#
#...k..#
########
"""
    simple_layout(env, art)
    assert step_skill(env, "explore")[4]["skill_status"] == RUNNING  # turned left, saw nothing
    obs, *_ = env.step(0)  # a low-level turn shows the key: not the explore skill's finding
    assert obs["text"] == "You have seen a red key. You carry nothing."
    # A new explore starts afresh: it is done only when it sees something new itself.
    status, steps, obs, _ = run_skill(env, "explore")
    assert status == DONE and steps > 1
    assert obs["text"] == "You have seen a red key, a locked red door. You carry nothing."


def test_feasible_skills_and_oracle_plan_on_a_layout():
    env = make()
    obs = simple_layout(env)
    assert obs["feasible_skills"].split("\n") == ["explore", "go to the red key"]
    assert obs["oracle_plan"].split("\n") == [
        "go to the red key",
        "pick up the red key",
        "explore",
        "go to the red door",
        "toggle the red door",
        "go to the goal",
    ]
    run_skill(env, "go to the red key")
    obs = env.unwrapped.observe()
    assert obs["oracle_plan"].split("\n")[0] == "pick up the red key"
    assert "pick up the red key" in obs["feasible_skills"].split("\n")


# -- skill text ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad", ["", "fly", "go to", "go to the red dragon", "pick up the red door", "toggle the goal"]
)
def test_invalid_skill_text_is_rejected_with_the_valid_forms(bad):
    env = make()
    with pytest.raises(InvalidSkillError) as err:
        step_skill(env, bad)
    message = str(err.value)
    assert repr(bad) in message or "only" in message or "needs an object" in message
    if "unknown" in message:
        assert "go to the <colour> <key|door|box|ball>" in message


def test_skill_text_is_normalised():
    env = make()
    simple_layout(env)
    _, _, _, _, info = step_skill(env, "  Go To red KEY. ")
    assert info["skill_status"] == RUNNING
    names = env.unwrapped.skill_names()
    assert "explore" in names and "toggle the grey box" in names and "go to the goal" in names
    for name in names:
        env.unwrapped.check_skill(name)


# -- the oracle ------------------------------------------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_oracle_solves_every_seed(task):
    env = gym.make(f"llmrl/{task}-v0")
    results = [solve_with_oracle(env, seed) for seed in range(40)]
    assert all(solved for solved, _ in results), [s for s, (ok, _) in enumerate(results) if not ok]
    assert max(steps for _, steps in results) < 100


def test_oracle_with_goal_anywhere_behind_the_wall():
    env = gym.make("llmrl/KeyInBox-v0", goal_behind_door=False)
    assert all(solve_with_oracle(env, seed)[0] for seed in range(20))


def test_go_to_walks_through_unseen_cells_when_the_seen_ones_lead_nowhere():
    # View 5, facing the wall: both keys are seen, the column x=1 leading round them is not.
    env = make("ColoredDoorKey", agent_view_size=5)
    art = """
#######
#..#..#
#..#..#
#.>#..#
#.g#..#
#.e#..#
#..#..#
#..L.G#
#######
"""
    env.unwrapped.load_layout(
        art, {"g": Key("green"), "e": Key("grey"), "L": Door("grey", is_locked=True)}
    )
    u = env.unwrapped
    assert not u.knowledge.known(1, 5)
    status, steps, _, _ = run_skill(env, "go to the grey key")
    assert status == DONE and tuple(u.front_pos) == (2, 5)
    assert steps <= 8


# -- invariants over random play -------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    task=st.sampled_from(TASKS),
    seed=st.integers(0, 10_000),
    actions=st.lists(st.integers(0, 5), min_size=1, max_size=60),
)
def test_agent_map_never_contradicts_the_world(task, seed, actions):
    """Everything changes right in front of the agent, so what it knows is always true."""
    env = gym.make(f"llmrl/{task}-v0")
    env.reset(seed=seed)
    u = env.unwrapped
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
        truth = u.grid.encode()  # the agent is not drawn: its cell holds what it stands on
        known = u.knowledge.cells[..., 0] != 0
        assert (u.knowledge.cells[known] == truth[known]).all()


@settings(max_examples=15, deadline=None)
@given(
    task=st.sampled_from(TASKS),
    seed=st.integers(0, 10_000),
    picks=st.lists(st.integers(0, 99), min_size=1, max_size=40),
)
def test_feasible_skills_are_exactly_those_that_act(task, seed, picks):
    env = gym.make(f"llmrl/{task}-v0")
    obs, _ = env.reset(seed=seed)
    u = env.unwrapped
    for pick in picks:
        feasible = obs["feasible_skills"].split("\n") if obs["feasible_skills"] else []
        names = ["the goal"] + [object_name(i) for i, _, _ in u.knowledge.seen_objects()]
        for skill in ["explore"] + [
            f"{v} {n}" for v in ("go to", "pick up", "toggle") for n in names
        ]:
            try:
                parse_skill(skill)
            except InvalidSkillError:
                continue  # e.g. "toggle the red key"
            acts = decide(parse_skill(skill), u.agent_state()).action is not None
            assert acts == (skill in feasible), skill
        if not feasible:
            break
        obs, _, terminated, truncated, _ = step_skill(env, feasible[pick % len(feasible)])
        if terminated or truncated:
            break


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=40), st.sampled_from(["go to the", "toggle a red box"])))
def test_skill_parser_accepts_or_explains(text):
    try:
        skill = parse_skill(text)
    except InvalidSkillError as err:
        assert str(err)
    else:
        assert parse_skill(skill.text) == skill
        assert skill.text in make().unwrapped.skill_names()


def test_gymnasium_make_with_the_module_prefix_in_a_fresh_interpreter():
    code = (
        "import gymnasium as gym;"
        "env = gym.make('llmrl.simulator.envs:llmrl/SimpleDoorKey-v0');"
        "obs, _ = env.reset(seed=0); print(obs['text'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("You carry nothing.")
