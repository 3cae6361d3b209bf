"""Offline RL through d3rlpy (`llmrl.learner.algorithms.offline_rl`): the registered algorithms
learn a trivial dataset, save versioned checkpoints and load them back."""

from __future__ import annotations

import numpy as np
import pytest

from llmrl.common.registry import registry
from llmrl.learner.versions import Versions

pytest.importorskip("d3rlpy")


def trivial_discrete(n: int = 600, seed: int = 0):
    """Observations in 4-D; the right action is which of the first two coordinates is larger
    (0 or 1) plus 2 when the third is positive: four actions the policy must tell apart."""
    import d3rlpy

    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    actions = (obs[:, 0] > obs[:, 1]).astype(np.int64) + 2 * (obs[:, 2] > 0)
    terminals = np.zeros(n, np.float32)
    terminals[9::10] = 1.0
    dataset = d3rlpy.dataset.MDPDataset(
        observations=obs,
        actions=actions,
        rewards=np.ones(n, np.float32),
        terminals=terminals,
        action_space=d3rlpy.constants.ActionSpace.DISCRETE,
        action_size=6,
    )
    return dataset, obs, actions


def test_discrete_bc_learns_a_trivial_dataset_and_reloads(tmp_path):
    dataset, obs, actions = trivial_discrete()
    bc = registry.get_algorithm("bc")
    progress = []
    checkpoint = bc.train(
        dataset,
        Versions(tmp_path / "bc"),
        on_progress=progress.append,
        steps=400,
        steps_per_epoch=100,
        batch_size=64,
        learning_rate=3e-3,
        hidden_units=[32, 32],
        tensorboard_dir=str(tmp_path / "tb"),
    )
    assert checkpoint.version == "1" and checkpoint.algorithm == "bc"
    assert sum(progress) == 400
    assert checkpoint.result["discrete"] and checkpoint.result["action_size"] == 6
    policy = bc.load(tmp_path / "bc")
    accuracy = float(np.mean(policy.act(obs) == actions))
    assert accuracy > 0.9
    assert any(p.name.startswith("events") for p in (tmp_path / "tb").iterdir())


def test_discrete_cql_fits_and_refuses_unknown_settings(tmp_path):
    dataset, obs, _ = trivial_discrete(n=300)
    cql = registry.get_algorithm("cql")
    checkpoint = cql.train(dataset, Versions(tmp_path / "cql"), steps=50, hidden_units=[16])
    assert checkpoint.config["alpha"] is None  # 10 for discrete CQL, KALM's setting
    assert cql.load(checkpoint).act(obs[:5]).shape == (5,)
    with pytest.raises(ValueError, match=r"^cql: epochs: unknown setting; allowed: steps, "):
        cql.train(dataset, Versions(tmp_path / "x"), epochs=3)
    with pytest.raises(ValueError, match="continuous"):
        registry.get_algorithm("iql").train(dataset, Versions(tmp_path / "iql"), steps=1)


def test_continuous_bc_learns_to_copy_the_observation(tmp_path):
    import d3rlpy

    rng = np.random.default_rng(1)
    obs = rng.uniform(-1, 1, size=(500, 2)).astype(np.float32)
    actions = np.clip(obs * 0.8, -1, 1).astype(np.float32)
    terminals = np.zeros(500, np.float32)
    terminals[49::50] = 1.0
    dataset = d3rlpy.dataset.MDPDataset(obs, actions, np.ones(500, np.float32), terminals)
    bc = registry.get_algorithm("bc")
    checkpoint = bc.train(
        dataset,
        Versions(tmp_path / "bc"),
        steps=300,
        batch_size=64,
        learning_rate=3e-3,
        hidden_units=[32, 32],
    )
    error = np.abs(bc.load(checkpoint).act(obs) - actions).mean()
    assert error < 0.1


def test_the_policy_follows_the_instruction_embedding_of_an_offline_dataset(tmp_path):
    """Same states, two instructions, two actions: only the embedding tells them apart."""
    from llmrl.common.offline_dataset import OfflineDataset

    rng = np.random.default_rng(2)
    episodes, steps = 40, 5
    ids = np.repeat(np.arange(episodes), steps)
    which = np.arange(episodes) % 2  # instruction 0 -> action 7, instruction 1 -> action 30
    dataset = OfflineDataset.from_arrays(
        env="ClevrRobot",
        source="scripted",
        observations=rng.uniform(-0.5, 0.5, size=(episodes * steps, 10)),
        actions=np.where(which[ids] == 0, 7, 30),
        rewards=np.zeros(episodes * steps),
        terminals=np.zeros(episodes * steps, bool),
        timeouts=np.tile([False] * (steps - 1) + [True], episodes),
        episode_ids=ids,
        instructions=np.where(which == 0, "push red left", "push cyan right"),
        goals=np.zeros((episodes, 6)),
    )
    embeddings = np.eye(2, 8, dtype=np.float32)[which]
    bc = registry.get_algorithm("bc")
    checkpoint = bc.train(
        dataset, Versions(tmp_path / "bc"), instruction_embeddings=embeddings, steps=200,
        batch_size=64, learning_rate=3e-3, hidden_units=[32, 32], action_size=40,
    )  # fmt: skip
    assert checkpoint.result["embedding_dim"] == 8 and checkpoint.result["action_size"] == 40
    policy = bc.load(checkpoint)
    states = rng.uniform(-0.5, 0.5, size=(20, 10))
    assert (policy.act(states, np.tile(np.eye(2, 8)[0], (20, 1))) == 7).all()
    assert (policy.act(states, np.tile(np.eye(2, 8)[1], (20, 1))) == 30).all()
    with pytest.raises(ValueError, match="embeddings"):
        policy.act(states)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"steps": -5}, "steps: Input should be greater than 0"),
        ({"batch_size": 0}, "batch_size: "),
        ({"steps_per_epoch": 1.5}, "steps_per_epoch: Input should be a valid integer"),
        ({"learning_rate": 0}, "learning_rate: "),
        ({"learning_rate": "3e-4"}, "learning_rate: "),
        ({"learning_rate": float("nan")}, "learning_rate: .*finite"),  # NaN passes comparisons
        ({"gamma": float("nan")}, "gamma: .*finite"),
        ({"alpha": float("inf")}, "alpha: .*finite"),
        ({"gamma": 1.5}, r"gamma: Input should be less than or equal to 1 \(got 1\.5\)"),
        ({"alpha": -1}, "alpha: "),
        ({"hidden_units": []}, "hidden_units: expected at least one width"),
        ({"hidden_units": "64"}, "hidden_units: "),
        ({"hidden_units": [64, 0]}, "hidden_units.1: Input should be greater than 0"),
        ({"hidden_units": [64, True]}, "hidden_units.1: Input should be a valid integer"),
        ({"action_size": 0}, "action_size: "),
        ({"epochs": 3}, "epochs: unknown setting; allowed: steps, "),
    ],
)
def test_bad_settings_are_refused_before_training_naming_the_key(tmp_path, settings, key):
    dataset, _, _ = trivial_discrete(n=50)
    with pytest.raises(ValueError, match=f"^bc: {key}"):
        registry.get_algorithm("bc").train(dataset, Versions(tmp_path / "bc"), **settings)
    assert not (tmp_path / "bc").exists() or not any((tmp_path / "bc").iterdir())


def test_a_too_small_action_size_is_refused_against_the_dataset(tmp_path):
    from llmrl.common.offline_dataset import OfflineDataset

    rng = np.random.default_rng(0)
    n = 20
    dataset = OfflineDataset.from_arrays(
        env="ClevrRobot",
        source="scripted",
        observations=rng.normal(size=(n, 10)),
        actions=np.arange(n) % 12,  # ids up to 11
        rewards=np.zeros(n),
        terminals=np.zeros(n, bool),
        timeouts=(np.arange(n) % 5) == 4,
        episode_ids=np.arange(n) // 5,
        final_observations=rng.normal(size=(4, 10)),
        instructions=np.asarray(["push"] * 4),
        goals=np.zeros((4, 6)),
    )
    progress = []
    with pytest.raises(ValueError, match=r"action_size: 10 is too small.*up to 11"):
        registry.get_algorithm("bc").train(
            dataset, Versions(tmp_path / "bc"), on_progress=progress.append, action_size=10
        )
    assert progress == []  # refused before the first step
    checkpoint = registry.get_algorithm("bc").train(
        dataset, Versions(tmp_path / "bc"), steps=2, batch_size=4, action_size=12
    )
    assert checkpoint.result["action_size"] == 12


def test_d3rlpy_configures_structlog_once():
    import logging

    import structlog

    from llmrl.learner.algorithms.offline_rl import _d3rlpy

    _d3rlpy()
    before = structlog.get_config()
    try:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
        mine = structlog.get_config()
        _d3rlpy()  # a later call leaves the configuration a caller made since alone
        assert structlog.get_config() == mine
    finally:
        structlog.configure(**before)


def test_fused_adam_kernel_reaches_d3rlpy_and_its_saved_policy_loads(tmp_path, monkeypatch):
    """Under LLMRL_ADAM=fused every Adam of a d3rlpy algorithm is torch's fused kernel, and
    the saved learnable, whose config names that factory, loads back."""
    dataset, obs, _ = trivial_discrete(n=300)
    cql = registry.get_algorithm("cql")
    plain = cql.load(cql.train(dataset, Versions(tmp_path / "plain"), steps=5, hidden_units=[8]))
    assert plain.learnable.config.optim_factory.get_type() == "adam"
    assert not plain.learnable.impl.modules.optim.optim.defaults["fused"]
    monkeypatch.setenv("LLMRL_ADAM", "fused")
    checkpoint = cql.train(dataset, Versions(tmp_path / "fused"), steps=5, hidden_units=[8])
    fused = cql.load(checkpoint)
    assert fused.learnable.config.optim_factory.get_type() == "llmrl_fused_adam"
    assert fused.learnable.impl.modules.optim.optim.defaults["fused"] is True
    assert fused.act(obs[:3]).shape == (3,)
