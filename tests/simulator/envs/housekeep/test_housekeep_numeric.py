"""The Housekeep env's numeric knowledge (`slots`, `object_receptacles`, `receptacle_rooms`):
what the agent knows, laid out like the actions, for RL agents that read numbers."""

from __future__ import annotations

import numpy as np
from support.housekeep import tiny_house

from llmrl.simulator.envs.base import step_skill
from llmrl.simulator.envs.housekeep import HousekeepEnv

ROOMS, RECS, OBJS = 3, 5, 4  # a small action layout: the tiny house has 2, 4 and 3


def parts(obs: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    slots = obs["slots"]
    rooms = slots[: 3 * ROOMS].reshape(ROOMS, 3)
    recs = slots[3 * ROOMS : 3 * ROOMS + 3 * RECS].reshape(RECS, 3)
    objs = slots[3 * ROOMS + 3 * RECS :].reshape(OBJS, 2)
    return rooms, recs, objs


def test_numeric_knowledge_follows_what_the_agent_found():
    env = HousekeepEnv(max_rooms=ROOMS, max_receptacles=RECS, max_objects=OBJS)
    obs, _ = env.reset(seed=0, options={"house": tiny_house()})
    assert env.observation_space.contains(obs)
    rooms, recs, objs = parts(obs)
    assert rooms.tolist() == [[1, 0, 0], [1, 0, 0], [0, 0, 0]]  # two rooms, none explored
    assert not recs.any() and not objs.any()
    assert not obs["object_receptacles"].any() and not obs["receptacle_rooms"].any()

    # the kitchen: counter_1 (slot 0) holds book_1 (slot 1), fridge_1 (slot 1) apple_1 (slot 2)
    obs, *_ = step_skill(env, "go to room kitchen_0")
    rooms, recs, objs = parts(obs)
    assert rooms[0].tolist() == [1, 1, 1] and rooms[1].tolist() == [1, 0, 0]
    assert recs[:, 0].tolist() == [1, 1, 0, 0, 0]
    assert obs["receptacle_rooms"].tolist() == [1, 1, 0, 0, 0]
    assert objs[:, 0].tolist() == [0, 1, 1, 0]
    assert obs["object_receptacles"].tolist() == [0, 1, 2, 0]

    obs, *_ = step_skill(env, "go to counter_1")
    assert parts(obs)[1][0].tolist()[2] == 1  # the agent stands at counter_1
    obs, *_ = step_skill(env, "pick up book_1")
    rooms, recs, objs = parts(obs)
    assert objs[1].tolist() == [1, 1]  # found, held
    assert obs["object_receptacles"][1] == 0  # in the hand, on no receptacle
    assert env.observation_space.contains(obs)

    obs, *_ = step_skill(env, "go to room bedroom_0")
    obs, *_ = step_skill(env, "go to shelf_1")
    obs, *_ = step_skill(env, "place book_1 on shelf_1")
    _, _, objs = parts(obs)
    assert objs[1].tolist() == [1, 0] and obs["object_receptacles"][1] == 1 + 3  # shelf_1
    assert obs["receptacle_rooms"].tolist() == [1, 1, 2, 2, 0]
    assert parts(obs)[0][:, 2].tolist() == [0, 1, 0]  # in the bedroom now
