"""The real Housekeep data: every scene loads with its episode facts; episodes are drawn by seed
and range."""

from __future__ import annotations

import numpy as np
import pytest

from llmrl.simulator.envs.housekeep import HousekeepEnv, load_house
from llmrl.simulator.envs.housekeep.data import (
    available_scenes,
    load_episodes,
    sanitize_name,
    split_scenes,
)

SCENES = {
    "Benevolence_2_int": "train",
    "Pomaria_0_int": "train",
    "Pomaria_2_int": "train",
    "Ihlen_1_int": "val",
    "Merom_1_int": "val",
}


def test_all_scenes_load_with_their_episode_facts(data_dir):
    assert available_scenes(data_dir) == SCENES
    assert split_scenes(data_dir, "val") == ["Ihlen_1_int", "Merom_1_int"]
    for scene, split in SCENES.items():
        raw = load_episodes(data_dir, scene)[3]
        house = load_house(data_dir, scene, 3)
        assert house.source == f"{split}/{scene}#3"
        assert len(house.objects) == raw["objects_count"]
        assert house.misplaced_at_start() == raw["misplaced_count"]
        # the episode's own start and end matrices say which objects start misplaced
        start, end = np.asarray(raw["start_matrix"]), np.asarray(raw["end_matrix"])
        starts_allowed = (start * end).sum(axis=0) > 0
        assert house.misplaced_objects() == np.flatnonzero(~starts_allowed).tolist()
        assert [o.category for o in house.objects] == [sanitize_name(c) for c in raw["objs_cats"]]
        rooms = {key.split("-")[0] for key in raw["recs_keys"]} - {"None"}
        assert set(house.rooms) == rooms
        # every object has a correct receptacle inside a room, and soft scores agree with the
        # >= 6 of 10 annotators rule wherever the pair is annotated
        assert house.allowed.any(axis=0).all()
        annotated = house.soft > 0
        assert np.array_equal(house.allowed[annotated], house.soft[annotated] >= 0.6)


def test_bad_scene_and_episode_are_named(data_dir):
    with pytest.raises(ValueError, match="Ihlen_1_int"):
        HousekeepEnv(data_dir=data_dir, scene="Nowhere_int")
    with pytest.raises(ValueError, match="episode must be in"):
        load_house(data_dir, "Merom_1_int", 10_000)


def test_random_episodes_of_a_split_are_seeded(data_dir):
    env = HousekeepEnv(data_dir=data_dir, split="val")
    sources = [env.reset(seed=s)[0] and env.house.source for s in (1, 2, 1)]
    assert sources[0] == sources[2]
    assert all(source.startswith("val/") for source in sources)


def test_episode_ranges_restrict_the_draw(data_dir):
    env = HousekeepEnv(data_dir=data_dir, scene="Merom_1_int", episode="10:13")
    drawn = {(env.reset(seed=s), env.house.source)[1] for s in range(12)}
    assert drawn <= {f"val/Merom_1_int#{i}" for i in (10, 11, 12)} and len(drawn) > 1
    with pytest.raises(ValueError, match="start:stop"):
        HousekeepEnv(data_dir=data_dir, episode="ten")


def test_a_scene_without_data_dir_reads_the_copy_this_machine_has(data_dir, monkeypatch):
    monkeypatch.setenv("LLMRL_HOUSEKEEP_DATA", str(data_dir))
    env = HousekeepEnv(scene="Merom_1_int", episode=3)
    assert env.data_dir == data_dir.resolve()
    env.reset(seed=0)
    assert env.house.source == "val/Merom_1_int#3"


def test_a_scene_on_a_machine_without_the_data_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMRL_HOUSEKEEP_DATA", raising=False)
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))  # no `llmrl data get` copy there
    with pytest.raises(ValueError, match="llmrl data get housekeep"):
        HousekeepEnv(episode=3)
    assert HousekeepEnv().data_dir is None  # nothing asked of the data: procedural houses
