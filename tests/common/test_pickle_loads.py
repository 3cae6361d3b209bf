"""A pickle is loaded from exactly the bytes whose digest was checked, and only from the
artifact store (LLMRL_HOME, or a folder this process chose), never from a data root.

The probe: whoever can write a data root replaced a trusted SB3 zip with a booby-trapped one of
the same size and restored its mtime; the digest remembered under (path, size, mtime) vouched
for it, and a load under another algorithm (a model-cache miss) ran the payload. Here the
payload, once unpickled, creates `marker`: the tests assert it never appears."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from llmrl.common import paths, trusted
from llmrl.common.paths import ARTIFACT_ROOTS_ENV, DATA_ROOTS_ENV
from llmrl.common.registry import registry


class _CreatesFile:
    """Unpickled, it opens (so creates) `marker`: what an attacker's payload would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _evil_zip_bytes(marker: Path, pad: int) -> bytes:
    payload = base64.b64encode(pickle.dumps(_CreatesFile(marker))).decode()
    data = {"policy_class": {":type:": "<class 'type'>", ":serialized:": payload}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("data", json.dumps(data))
        archive.writestr("_stable_baselines3_version", "2.9.2")
        archive.writestr("pad", b"\0" * pad)  # stored: each byte of padding is a byte more
    return buffer.getvalue()


def swap_keeping_size_and_mtime(path: Path, payload: bytes) -> None:
    """Overwrite `path` with `payload` (as long as the file) and restore its times."""
    before = path.stat()
    assert len(payload) == before.st_size
    with path.open("r+b") as handle:
        handle.write(payload)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def evil_zip_like(path: Path, marker: Path) -> bytes:
    """An SB3-format zip running the payload, exactly as long as the file at `path`."""
    bare = len(_evil_zip_bytes(marker, 0))
    evil = _evil_zip_bytes(marker, path.stat().st_size - bare)
    assert len(evil) == path.stat().st_size
    return evil


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("LLMRL_HOME", str(home))
    return home


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "payload-ran"


def _saved_ppo(path: Path) -> Path:
    import gymnasium as gym
    from stable_baselines3 import PPO

    path.parent.mkdir(parents=True, exist_ok=True)
    PPO("MlpPolicy", gym.make("CartPole-v1"), n_steps=32, batch_size=32, device="cpu").save(path)
    trusted.record(path)  # as the project does for every zip it saves
    return path


def test_a_trusted_zip_swapped_for_a_payload_of_its_size_and_mtime_never_runs(home, marker):
    from llmrl.learner.algorithms import load_cached

    model = _saved_ppo(home / "models" / "cartpole.zip")
    assert load_cached("ppo", model) is not None  # loads, and its digest is remembered
    swap_keeping_size_and_mtime(model, evil_zip_like(model, marker))
    for algorithm in ("a2c", "dqn"):  # another algorithm: the model cache misses
        with pytest.raises(ValueError, match="names no artifact llmrl saved") as refused:
            load_cached(algorithm, model)
        assert str(model) in str(refused.value)
    with pytest.raises(ValueError, match="names no artifact llmrl saved"):
        registry.get_algorithm("ppo").load(model)
    from llmrl.recipes.glam.drrn_policy import load_drrn

    with pytest.raises(ValueError, match="names no artifact llmrl saved"):
        load_drrn(str(model))
    assert not marker.exists()


def test_what_is_loaded_is_the_bytes_that_were_hashed(home, marker):
    """The file is read once: bytes checked, then those bytes (not the path) are loaded."""
    model = _saved_ppo(home / "models" / "cartpole.zip")
    verified = trusted.open_verified(model, "model")
    swap_keeping_size_and_mtime(model, evil_zip_like(model, marker))
    from stable_baselines3 import PPO

    assert PPO.load(verified, device="cpu").policy is not None  # the bytes read, not the swap
    with pytest.raises(trusted.UntrustedArtifactError, match=r"model: .*cartpole\.zip"):
        trusted.open_verified(model, "model")
    assert not marker.exists()


def test_a_plain_pickle_swapped_in_is_refused(home, marker):
    """A replay buffer (`pickle.load` on the file) swapped the same way."""
    buffer = home / "line" / "1" / "replay_buffer.pkl"
    buffer.parent.mkdir(parents=True)
    buffer.write_bytes(pickle.dumps({"observations": list(range(200))}))
    trusted.record(buffer)
    assert trusted.is_recorded(buffer)
    evil = pickle.dumps(_CreatesFile(marker))
    swap_keeping_size_and_mtime(buffer, evil + b"." * (buffer.stat().st_size - len(evil)))
    assert not trusted.is_recorded(buffer)
    with pytest.raises(trusted.UntrustedArtifactError, match=r"replay_buffer\.pkl"):
        trusted.open_verified(buffer, "checkpoints")
    assert not marker.exists()


def test_pickles_never_load_from_a_data_root_even_when_recorded(
    home, tmp_path, monkeypatch, marker
):
    data = tmp_path / "data-root"
    monkeypatch.setenv(DATA_ROOTS_ENV, str(data))
    monkeypatch.delenv(ARTIFACT_ROOTS_ENV, raising=False)  # the tests' folders are, usually
    monkeypatch.setattr(paths, "_process_roots", [])
    model = _saved_ppo(data / "models" / "cartpole.zip")  # its digest recorded, even so
    assert trusted.is_recorded(model)
    with pytest.raises(ValueError, match="names no artifact llmrl saved") as refused:
        registry.get_algorithm("ppo").load(model)
    assert str(model) in str(refused.value)
    with pytest.raises(trusted.UntrustedArtifactError):
        trusted.resolve_artifact(str(model), "policy.model")
    # the same bytes under LLMRL_HOME load
    mine = home / "models" / "cartpole.zip"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(model.read_bytes())
    assert registry.get_algorithm("ppo").load(mine) is not None
    assert trusted.resolve_artifact(str(mine), "policy.model") == mine
    assert not marker.exists()


def test_a_folder_the_process_chose_is_its_own_store(home, tmp_path, monkeypatch):
    """`llmrl run --out DIR` (allow_root), or a folder of LLMRL_ARTIFACT_ROOTS: the models
    saved there load from it."""
    monkeypatch.delenv(ARTIFACT_ROOTS_ENV, raising=False)
    monkeypatch.setattr(paths, "_process_roots", [])
    out = tmp_path / "runs" / "mine"
    model = _saved_ppo(out / "models" / "cartpole.zip")
    with pytest.raises(ValueError, match="names no artifact"):
        registry.get_algorithm("ppo").load(model)
    paths.allow_root(out)
    assert registry.get_algorithm("ppo").load(model) is not None
    monkeypatch.setattr(paths, "_process_roots", [])
    monkeypatch.setenv(ARTIFACT_ROOTS_ENV, str(tmp_path / "runs"))
    assert registry.get_algorithm("ppo").load(model) is not None


def test_a_copy_vouches_only_for_the_bytes_the_project_saved(home, marker):
    """`publish` copies a saved version's model to a fixed path and records the copy: a file
    swapped into the version meanwhile is refused, not laundered into a trusted copy."""
    from llmrl.learner.versions import publish

    model = _saved_ppo(home / "line" / "1" / "model.zip")
    copy = publish(model, home / "models" / "cartpole.zip")
    assert trusted.is_recorded(copy) and copy.read_bytes() == model.read_bytes()
    swap_keeping_size_and_mtime(model, evil_zip_like(model, marker))
    with pytest.raises(trusted.UntrustedArtifactError, match="checkpoint: "):
        publish(model, home / "models" / "other.zip")
    assert not (home / "models" / "other.zip").exists()
    assert not trusted.is_recorded(model)
    assert not marker.exists()


def test_a_policy_job_saves_its_models_in_the_artifact_store_only(home, tmp_path, monkeypatch):
    from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job

    data = tmp_path / "data-root"
    monkeypatch.setenv(DATA_ROOTS_ENV, str(data))
    monkeypatch.delenv(ARTIFACT_ROOTS_ENV, raising=False)
    monkeypatch.setattr(paths, "_process_roots", [])
    body = {"kind": "when2ask", "policy": "asking", "env": "SimpleDoorKey", "total_timesteps": 8}
    with pytest.raises(PolicyJobError) as refused:
        parse_policy_job({**body, "model_path": str(data / "models" / "m.zip")})
    [error] = refused.value.errors
    assert error["loc"] == ("model_path",) and "artifact store" in error["msg"]
    assert parse_policy_job({**body, "model_path": str(home / "models" / "m.zip")})
