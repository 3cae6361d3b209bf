"""The restricted loader for pickled NumPy data: numpy and plain data load, code never runs."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from llmrl.common.safe_numpy import UnsafePickleError, load_npy


class _WritesAFile:
    """A pickle payload that, when unpickled, creates the file named by `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_object_arrays_of_plain_data_and_arrays_load(tmp_path):
    data = {
        "names": ["kitchen|sink", "bedroom|bed"],
        "ranks": np.arange(12, dtype=np.int16).reshape(2, 3, 2),
        "scale": np.float64(0.5),
        "meta": (1, 2.5, True, None, "x"),
    }
    np.save(tmp_path / "data.npy", np.array(data, dtype=object), allow_pickle=True)
    loaded = load_npy(tmp_path / "data.npy").item()
    assert loaded["names"] == data["names"] and loaded["meta"] == data["meta"]
    assert np.array_equal(loaded["ranks"], data["ranks"]) and loaded["ranks"].dtype == np.int16
    assert loaded["scale"] == 0.5


def test_plain_arrays_load_without_pickle(tmp_path):
    np.save(tmp_path / "plain.npy", np.eye(3, dtype=np.float32))
    assert np.array_equal(load_npy(tmp_path / "plain.npy"), np.eye(3, dtype=np.float32))


def test_a_pickle_naming_a_callable_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "pwned"
    np.save(tmp_path / "evil.npy", np.array({"x": _WritesAFile(marker)}, dtype=object))
    with pytest.raises(UnsafePickleError, match="refusing to unpickle pathlib"):
        load_npy(tmp_path / "evil.npy")
    assert not marker.exists()
    # the same file would run its payload through np.load(allow_pickle=True)
    np.load(tmp_path / "evil.npy", allow_pickle=True)
    assert marker.exists()


def test_a_bare_pickle_posing_as_npy_is_refused(tmp_path):
    path = tmp_path / "data.npy"
    path.write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(ValueError):
        load_npy(path)
