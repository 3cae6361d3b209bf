"""KALM's released .npy: it loads through the restricted unpickler into OfflineDatasets, its
success labels agree with our success function, its pushes move balls our physics' way, and a
wrong or malicious file is refused naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmrl.common.offline_dataset import DatasetFormatError, OfflineDataset
from llmrl.common.safe_numpy import load_npy
from llmrl.recipes.kalm import released
from llmrl.simulator.envs import clevr_robot


@pytest.fixture(scope="module")
def data_dir(kalm_data_dir: Path) -> Path:
    return kalm_data_dir


def test_clevr_loads_with_its_goals_and_labels(data_dir, tmp_path):
    dataset = released.load_released_clevr(data_dir / released.CLEVR_FILE)
    assert (dataset.env, dataset.source, dataset.num_episodes) == ("ClevrRobot", "released", 80)
    assert dataset.observations.shape[1] == 10 and dataset.discrete
    assert np.array_equal(dataset.goals, clevr_robot.GOALS)  # trajectory i pursues goal i
    assert dataset.terminals.sum() == 80 and not dataset.timeouts.any()
    for episode in dataset.episodes():
        assert episode.terminals[-1] and not episode.terminals[:-1].any()
        assert clevr_robot.success(episode.final_observation, episode.goal)
        assert all(clevr_robot.valid_state(s) for s in episode.observations)
    assert dataset.instructions[0] == "Push the purple ball behind the cyan ball"
    every = released.load_released_clevr(data_dir / released.CLEVR_FILE, phrasings="all")
    assert every.num_episodes == 80 * 54 and len(every) == 54 * len(dataset)
    assert_round_trip(dataset, tmp_path)


def assert_round_trip(dataset: OfflineDataset, tmp_path: Path) -> None:
    loaded = OfflineDataset.load(dataset.save(tmp_path / "released.npz"))
    assert np.array_equal(loaded.observations, dataset.observations)
    assert np.array_equal(loaded.instructions, dataset.instructions)


def test_released_labels_agree_with_our_success_function(data_dir):
    agreement = released.label_agreement(data_dir / released.CLEVR_FILE)
    assert agreement.final_states_successful == agreement.trajectories == 80
    assert agreement.steps_agreeing == agreement.steps > 80


def test_released_pushes_move_the_ball_our_way(data_dir):
    agreement = released.physics_agreement(data_dir / released.CLEVR_FILE)
    assert agreement.transitions > 800 and agreement.pushes > 600
    assert agreement.rate > 0.95
    assert 0.7 < agreement.median_length_ratio < 1.3
    assert "move the pushed ball the same way" in released.describe(agreement)


def test_metaworld_loads_as_v2_data(data_dir):
    dataset = released.load_released_metaworld(data_dir / released.METAWORLD_FILE)
    assert (dataset.env, dataset.num_episodes) == ("MetaWorld-v2", 10)
    assert dataset.observations.shape[1] == 91 and dataset.actions.shape[1] == 4
    assert dataset.goals.shape == (10, 3) and dataset.terminals.sum() == 10
    phrasings = released.released_instructions(data_dir / released.METAWORLD_FILE)
    assert len(phrasings) == 10 and all(len(texts) == 20 for texts in phrasings.values())


def save_dict(path: Path, data: dict) -> Path:
    np.save(path, np.array(data, dtype=object), allow_pickle=True)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"actions": None}, "key 'actions' is missing"),
        ({"observations": np.zeros((80, 50, 9), np.float32)}, "key 'observations': expected shape"),
        ({"goals": np.zeros((79, 50, 6), np.float32)}, "key 'goals': 79 trajectories"),
        ({"rewards": np.zeros((80, 50, 1), np.int32)}, "key 'rewards': expected dtype"),
        ({"actions": np.full((80, 50), 40, np.int32)}, r"key 'actions': expected ids 0\.\.39"),
        ({"masks": np.zeros((80, 50), np.int32)}, "key 'masks'"),
    ],
)
def test_a_wrong_file_names_the_file_and_the_key(data_dir, tmp_path, change, message):
    data = load_npy(data_dir / released.CLEVR_FILE).item()
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    path = save_dict(tmp_path / "wrong.npy", data)
    with pytest.raises(DatasetFormatError, match=message) as error:
        released.load_released_clevr(path)
    assert str(path) in str(error.value)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickle_with_code_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path = save_dict(tmp_path / "evil.npy", {"observations": _Payload(marker)})
    with pytest.raises(DatasetFormatError, match="refusing to unpickle"):
        released.load_released_clevr(path)
    assert not marker.exists()
    with pytest.raises(DatasetFormatError, match="no such file"):
        released.load_released_clevr(tmp_path / "absent.npy")
