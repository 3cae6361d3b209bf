"""OfflineDataset: the documented .npz round trip, clear errors naming file and field,
concatenation, episodes and the d3rlpy conversion."""

from __future__ import annotations

import numpy as np
import pytest

from llmrl.common.offline_dataset import DatasetFormatError, OfflineDataset, concatenate


def make_dataset(lengths=(3, 2), obs_dim=4, discrete=True, seed=0, source="scripted"):
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    ids = np.repeat(np.arange(len(lengths)), lengths)
    ends = np.cumsum(lengths) - 1
    terminals = np.zeros(n, bool)
    terminals[ends[0]] = True  # the first episode succeeds, the others time out
    timeouts = np.zeros(n, bool)
    timeouts[ends[1:]] = True
    actions = (
        rng.integers(0, 40, n).astype(np.int64)
        if discrete
        else rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    )
    return OfflineDataset(
        observations=rng.normal(size=(n, obs_dim)).astype(np.float32),
        actions=actions,
        rewards=rng.normal(size=n).astype(np.float32),
        terminals=terminals,
        timeouts=timeouts,
        episode_ids=ids.astype(np.int64),
        instructions=np.array([f"push ball {i}" for i in range(len(lengths))]),
        goals=rng.integers(0, 3, (len(lengths), 6)).astype(np.float32),
        env="ClevrRobot",
        source=source,
        final_observations=rng.normal(size=(len(lengths), obs_dim)).astype(np.float32),
    )


def assert_same(a: OfflineDataset, b: OfflineDataset) -> None:
    for name in (
        "observations",
        "actions",
        "rewards",
        "terminals",
        "timeouts",
        "episode_ids",
        "instructions",
        "goals",
        "final_observations",
    ):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert (a.env, a.source) == (b.env, b.source)


@pytest.mark.parametrize("discrete", [True, False])
def test_save_and_load_round_trip_without_pickles(tmp_path, discrete):
    dataset = make_dataset(discrete=discrete)
    path = dataset.save(tmp_path / "sub" / "data.npz")
    with np.load(path, allow_pickle=False) as raw:  # readable without pickles
        assert "observations" in raw.files
    assert_same(OfflineDataset.load(path), dataset)


def test_final_observations_are_optional(tmp_path):
    dataset = make_dataset()
    dataset.final_observations = None
    loaded = OfflineDataset.load(dataset.save(tmp_path / "d.npz"))
    assert loaded.final_observations is None


def rewrite(path, **changes):
    with np.load(path, allow_pickle=False) as raw:
        arrays = {name: raw[name] for name in raw.files}
    for name, value in changes.items():
        if value is None:
            del arrays[name]
        else:
            arrays[name] = value
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"observations": np.zeros((5, 4, 1), np.float32)}, "observations", "2-D"),
        ({"observations": np.zeros((5, 4), np.float64)}, "observations", "float32"),
        ({"rewards": np.zeros(4, np.float32)}, "rewards", "5 rows"),
        ({"goals": np.zeros((3, 6), np.float32)}, "goals", "2 rows"),
        ({"terminals": np.zeros(5, np.int32)}, "terminals", "bool"),
        ({"actions": np.zeros(5, np.float32)}, "actions", "int64"),
        ({"episode_ids": np.array([0, 0, 1, 0, 1])}, "episode_ids", "contiguous"),
        ({"final_observations": np.zeros((2, 3), np.float32)}, "final_observations", "columns"),
        ({"instructions": None}, "instructions", "missing"),
        ({"source": np.array("dreamed")}, "source", "imagined"),
        ({"rewards": np.array([0, 1, np.nan, 0, 0], np.float32)}, "rewards", "non-finite"),
    ],
)
def test_a_wrong_file_names_the_file_and_the_field(tmp_path, change, field, problem):
    path = make_dataset().save(tmp_path / "bad.npz")
    rewrite(path, **change)
    with pytest.raises(DatasetFormatError, match=problem) as error:
        OfflineDataset.load(path)
    assert str(path) in str(error.value) and repr(field) in str(error.value)


def test_a_file_with_pickles_or_not_a_dataset_is_refused(tmp_path):
    path = make_dataset().save(tmp_path / "pickled.npz")
    rewrite(path, instructions=np.array(["a", {"b": 1}], dtype=object))
    with pytest.raises(DatasetFormatError, match="pickle"):
        OfflineDataset.load(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DatasetFormatError, match=r"junk\.npz"):
        OfflineDataset.load(tmp_path / "junk.npz")


def test_building_in_memory_checks_too():
    good = make_dataset()
    with pytest.raises(DatasetFormatError, match="'rewards'"):
        OfflineDataset(**{**vars(good), "rewards": good.rewards[:-1]})
    cast = OfflineDataset.from_arrays(
        env="ClevrRobot",
        source="released",
        observations=good.observations.astype(np.float64),
        actions=good.actions.astype(np.int32),
        rewards=good.rewards.tolist(),
        terminals=good.terminals.astype(np.int8),
        timeouts=good.timeouts,
        episode_ids=good.episode_ids.astype(np.int32),
        instructions=list(good.instructions),
        goals=good.goals.astype(np.float64),
    )
    assert cast.actions.dtype == np.int64 and cast.observations.dtype == np.float32


def test_episodes_and_concatenate():
    a, b = make_dataset((3, 2), seed=1), make_dataset((4,), seed=2, source="imagined")
    both = concatenate(a, b)
    assert len(both) == 9 and both.num_episodes == 3 and both.source == "scripted"
    assert both.episode_ids.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    episodes = list(both.episodes())
    assert [len(e) for e in episodes] == [3, 2, 4]
    assert episodes[2].instruction == "push ball 0"
    assert np.array_equal(episodes[2].observations, b.observations)
    assert np.array_equal(episodes[1].final_observation, a.final_observations[1])
    with pytest.raises(DatasetFormatError, match="observations"):
        OfflineDataset.concatenate(a, make_dataset(obs_dim=5))
    with pytest.raises(DatasetFormatError, match="env"):
        OfflineDataset.concatenate(a, OfflineDataset(**{**vars(b), "env": "MetaWorld"}))


@pytest.mark.parametrize("discrete", [True, False])
def test_to_mdp_dataset_keeps_episodes_and_appends_embeddings(discrete):
    pytest.importorskip("d3rlpy")
    # the last episode ends in neither terminal nor timeout: the conversion must still cut it
    dataset = make_dataset((3, 2, 4), discrete=discrete)
    dataset.timeouts[-1] = False
    embeddings = np.arange(6, dtype=np.float32).reshape(3, 2)
    mdp = dataset.to_mdp_dataset(with_instruction_embeddings=embeddings, action_size=40)
    # the episodes without a terminal carry their final observation in one more row
    assert [e.size() for e in mdp.episodes] == [3, 3, 5]
    assert [bool(e.terminated) for e in mdp.episodes] == [True, False, False]
    last = mdp.episodes[2].observations
    assert last.shape == (5, 6) and np.array_equal(last[:, 4:], np.tile([4.0, 5.0], (5, 1)))
    assert np.array_equal(last[:4, :4], dataset.observations[5:])
    assert np.array_equal(last[4, :4], dataset.final_observations[2])
    if discrete:
        assert mdp.dataset_info.action_size == 40
    else:
        assert mdp.dataset_info.action_size == 4
    with pytest.raises(DatasetFormatError, match="one row per episode"):
        dataset.to_mdp_dataset(with_instruction_embeddings=embeddings[:2])


@pytest.mark.parametrize("discrete", [True, False])
def test_d3rlpy_sees_every_transition_of_a_truncated_episode(discrete):
    pytest.importorskip("d3rlpy")
    from d3rlpy.dataset import BasicTransitionPicker

    # a terminal episode of 3 steps, a timeout of 2, a one-step timeout, one cut without a flag
    dataset = make_dataset((3, 2, 1, 4), discrete=discrete)
    dataset.timeouts[-1] = False
    embeddings = np.arange(8, dtype=np.float32).reshape(4, 2)
    mdp = dataset.to_mdp_dataset(with_instruction_embeddings=embeddings, action_size=40)
    # d3rlpy keeps size - 1 transitions of an episode without a terminal (the last row has no
    # next observation): the final observation is appended so that none of the 10 is lost
    assert mdp.transition_count == len(dataset) == 10
    assert [e.transition_count for e in mdp.episodes] == [3, 2, 1, 4]
    assert [bool(e.terminated) for e in mdp.episodes] == [True, False, False, False]
    picker = BasicTransitionPicker()
    for e, episode in enumerate(dataset.episodes()):
        observed = np.hstack([episode.observations, np.tile(embeddings[e], (len(episode), 1))])
        for t in range(len(episode)):
            transition = picker(mdp.episodes[e], t)
            np.testing.assert_array_equal(transition.observation, observed[t])
            np.testing.assert_array_equal(
                np.reshape(transition.action, -1), np.reshape(episode.actions[t], -1)
            )
            assert transition.reward[0] == pytest.approx(episode.rewards[t])
            if t + 1 < len(episode):
                np.testing.assert_array_equal(transition.next_observation, observed[t + 1])
            elif e > 0:  # the truncated episodes' last step leads to their final observation
                final = np.concatenate([episode.final_observation, embeddings[e]])
                np.testing.assert_array_equal(transition.next_observation, final)
                assert transition.terminal == 0.0
            else:  # a terminal step: d3rlpy's zero next observation, terminal 1
                assert transition.terminal == 1.0
    # without final observations the last step of a truncated episode cannot be kept
    dataset.final_observations = None
    assert dataset.to_mdp_dataset(action_size=40).transition_count == 10 - 3


def test_a_bare_npy_array_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "array.npz"
    with path.open("wb") as handle:
        np.save(handle, np.zeros(3))
    with pytest.raises(DatasetFormatError, match=r"array\.npz: not a \.npz dataset"):
        OfflineDataset.load(path)
