"""CrafterText: ELLM's captions on hand-built crafter states, transition captions of real
steps, crafter's episode end, bounded settings, and worlds of it in-process and over gRPC."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from support.world_rollouts import assert_same

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.envs.crafter.captions import state_caption, transition_caption
from llmrl.simulator.envs.crafter.env import CrafterTextEnv
from llmrl.simulator.envs.crafter.vocabulary import (
    ACHIEVEMENTS,
    ACTION_NAMES,
    GOAL_PREREQUISITES,
    INVENTORY_ITEMS,
    SEMANTIC_IDS,
    SEMANTIC_NAMES,
)
from llmrl.simulator.world import World, WorldError

pytest.importorskip("crafter")  # the [crafter] extra

FULL = {"health": 9, "food": 9, "drink": 9, "energy": 9}


def view(*names: str) -> np.ndarray:
    """A 9x7 local map of grass with the player in the middle and `names` along the top."""
    local = np.full((9, 7), SEMANTIC_IDS["grass"])
    local[4, 3] = SEMANTIC_IDS["player"]
    for x, name in enumerate(names):
        local[x, 0] = SEMANTIC_IDS[name]
    return local


# -- state captions on hand-built states ----------------------------------------------------
def test_caption_of_a_tree_in_view_and_targeted():
    assert state_caption(view("tree"), "tree", FULL) == (
        "you see grass and tree. you are targeting tree."
    )


def test_caption_lists_things_sorted_with_and_leaving_out_sand_player_and_arrows():
    caption = state_caption(view("water", "tree", "sand", "arrow", "table"), "grass", FULL)
    assert caption == ("you see crafting table, grass, tree, and water. you are targeting grass.")


def test_caption_of_holding_wood_and_a_sapling():
    inventory = {**FULL, "wood": 3, "sapling": 1, "wood_pickaxe": 1}
    assert state_caption(view(), "path", inventory) == (
        "you see grass. you have in your inventory plant, wood, wood pickaxe."
    )


def test_caption_of_a_thirsty_player_and_the_threshold():
    thirsty = {**FULL, "drink": 4}
    assert state_caption(view(), None, thirsty).endswith("you feel thirsty.")
    assert "thirsty" not in state_caption(view(), None, thirsty, status_threshold=3)
    weak = {"health": 1, "food": 2, "drink": 8, "energy": 0}
    assert state_caption(view(), None, weak).endswith("you feel hurt, hungry, thirsty, sleepy.")


def test_caption_of_an_empty_view_and_the_issue_example_form():
    assert state_caption(np.zeros((9, 7), int), None, FULL) == "you see nothing."
    caption = state_caption(
        view("tree", "water"), "tree", {**FULL, "drink": 5, "wood": 1, "sapling": 2}
    )
    assert caption == (
        "you see grass, tree, and water. you are targeting tree. "
        "you have in your inventory plant, wood. you feel thirsty."
    )


def test_transition_captions_of_achievements_hits_and_sleep():
    assert transition_caption([]) == ""
    assert transition_caption(["collect_wood"]) == "chop tree"
    assert transition_caption(["eat_cow"], hit="cow") == "attack cow"
    assert transition_caption([], hit="zombie") == "attack zombie"
    assert transition_caption([], fell_asleep=True) == "sleep"
    assert transition_caption(["wake_up", "collect_drink"]) == "wake up and drink water"
    with pytest.raises(ValueError, match="achieved"):
        transition_caption(["fly"])


# -- the real env ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def env():
    env = CrafterTextEnv(length=50)
    yield env
    env.close()


def facing_cell(env: CrafterTextEnv) -> tuple[int, int]:
    player = env.player
    return (int(player.pos[0] + player.facing[0]), int(player.pos[1] + player.facing[1]))


def act(env: CrafterTextEnv, action: str) -> dict:
    obs, *_ = env.step(ACTION_NAMES.index(action))
    return obs


def clear_front(env: CrafterTextEnv, material: str) -> tuple[int, int]:
    cell = facing_cell(env)
    obj = env.world[cell][1]
    if obj is not None:
        env.world.remove(obj)
    env.world[cell] = material
    return cell


def test_real_state_caption_names_the_faced_tree_and_held_items(env):
    env.reset(seed=0)
    clear_front(env, "tree")
    env.player.inventory.update(wood=2, sapling=1, drink=3)
    caption = env.caption()
    assert "tree" in caption.split(".")[0]
    assert "you are targeting tree." in caption
    assert "you have in your inventory plant, wood." in caption
    assert caption.endswith("you feel thirsty.")


def test_chop_drink_place_and_move_captions(env):
    obs, _ = env.reset(seed=1)
    assert obs["transition_caption"] == ""
    clear_front(env, "tree")
    obs = act(env, "do")
    assert obs["transition_caption"] == "chop tree"
    assert obs["inventory"][INVENTORY_ITEMS.index("wood")] == 1
    assert obs["achievements"][ACHIEVEMENTS.index("collect_wood")] == 1
    clear_front(env, "water")
    env.player.inventory["drink"] = 5
    assert act(env, "do")["transition_caption"] == "drink water"
    clear_front(env, "grass")
    env.player.inventory["wood"] = 2
    obs = act(env, "place_table")
    assert obs["transition_caption"] == "place crafting table"
    assert "you are targeting crafting table." in obs["caption"]
    assert act(env, "place_table")["transition_caption"] == ""  # no wood left, table in front
    assert act(env, "noop")["transition_caption"] == ""


def test_attack_caption_on_every_hit_of_a_cow(env):
    import crafter.objects

    env.reset(seed=2)
    cell = clear_front(env, "grass")
    cow = crafter.objects.Cow(env.world, cell)
    env.world.add(cow)
    assert "you are targeting cow." in env.caption()
    obs = act(env, "do")
    assert obs["transition_caption"] == "attack cow"
    assert cow.health == 2
    assert obs["achievements"][ACHIEVEMENTS.index("eat_cow")] == 0


def test_death_terminates_and_length_truncates(env):
    env.reset(seed=3)
    env.player.health = 0
    _, _, terminated, truncated, _ = env.step(0)
    assert (terminated, truncated) == (True, False)
    env.reset(seed=3)
    ends = [env.step(0)[2:4] for _ in range(50)]
    assert ends[-1] == (False, True) and not any(any(end) for end in ends[:-1])


def test_seeded_resets_repeat_and_differ_between_seeds(env):
    first = env.reset(seed=5)[0]["local_map"]
    later = env.reset()[0]["local_map"]
    again = env.reset(seed=5)[0]["local_map"]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, later)


def test_pixels_on_request_and_gymnasium_make():
    env = gym.make("llmrl/CrafterText-v0", pixels=True, length=5)
    obs, _ = env.reset(seed=0)
    assert obs["pixels"].shape == (64, 64, 3) and obs["pixels"].dtype == np.uint8
    assert env.observation_space.contains(obs)
    assert "pixels" not in CrafterTextEnv().observation_space.spaces


@pytest.mark.parametrize(
    ("setting", "value"),
    [("length", 0), ("area", 8), ("area", 1000), ("pixels", "yes"), ("status_threshold", 11)],
)
def test_bad_settings_are_refused_naming_the_setting(setting, value):
    with pytest.raises(ValueError, match=f"^{setting}: expected"):
        CrafterTextEnv(**{setting: value})


def test_bad_action_is_refused(env):
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"^action: "):
        env.step(17)


def test_names_match_crafter():
    import crafter.constants as c

    assert tuple(c.actions) == ACTION_NAMES
    assert tuple(c.achievements) == ACHIEVEMENTS
    assert tuple(c.items) == INVENTORY_ITEMS
    env = CrafterTextEnv()
    materials = {name or "none": i for name, i in env.crafter._sem_view._mat_ids.items()}
    objects = {cls.__name__.lower(): i for cls, i in env.crafter._sem_view._obj_ids.items()}
    assert {**materials, **objects} == {name: i for i, name in enumerate(SEMANTIC_NAMES)}


def test_goal_prerequisites_follow_crafter_rules():
    import crafter.constants as c

    for material, rule in c.collect.items():
        goals = [g for g, p in GOAL_PREREQUISITES.items() if p.in_view == (material,)]
        assert len(goals) == 1, material
        assert GOAL_PREREQUISITES[goals[0]].inventory == rule["require"], material
    for thing, rule in c.place.items():
        name = "crafting table" if thing == "table" else thing
        assert GOAL_PREREQUISITES[f"place {name}"].inventory == rule["uses"], thing
    for tool, rule in c.make.items():
        prerequisites = GOAL_PREREQUISITES[f"make {tool.replace('_', ' ')}"]
        assert prerequisites.inventory == rule["uses"], tool
        assert prerequisites.in_view == tuple(rule["nearby"]), tool


# -- worlds -----------------------------------------------------------------------------------
def random_rollout(world, steps: int) -> list[dict]:
    rng = np.random.default_rng(1)
    out = [world.reset()]
    for _ in range(steps):
        out.append(world.step(rng.integers(0, 17, world.num_envs)))
    return out


def test_remote_world_equals_in_process_world(sim_server):
    # (sharded worlds are env-agnostic and tested in test_simulator_real_envs.py)
    settings = {"num_envs": 2, "seed": 7, "length": 30}
    with World("CrafterText", **settings) as local:
        expected = random_rollout(local, 40)  # one episode end (length 30) included
    assert expected[0]["caption"].dtype.kind == "U"
    assert any(step["transition_caption"].any() for step in expected)
    assert any((step["step_type"] == 2).any() for step in expected)
    with RemoteWorld(sim_server.address, "CrafterText", **settings) as remote:
        assert set(remote.observation_space.spaces) == set(local.observation_space.spaces)
        assert_same(random_rollout(remote, 40), expected)


def test_remote_world_refuses_a_bad_setting_naming_it(sim_server):
    with pytest.raises(WorldError, match="length: expected"):
        RemoteWorld(sim_server.address, "CrafterText", num_envs=1, length=-1)
