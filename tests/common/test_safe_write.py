"""`llmrl.common.safe_write`: a file written in a folder a request named never goes through a
link planted at its name, beside it, or in place of the folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmrl.common import safe_write
from llmrl.common.paths import PathOutsideRootsError
from llmrl.common.safe_write import atomic_writer, write_text

SECRET = "do not touch\n"


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text(SECRET)
    return {"root": root, "outside": outside, "victim": victim}


def test_a_link_at_the_name_is_replaced_not_followed(places):
    path = places["root"] / "stats.json"
    path.symlink_to(places["victim"])
    write_text(path, "{}\n", roots=[places["root"]])
    assert places["victim"].read_text() == SECRET
    assert path.is_file() and not path.is_symlink() and path.read_text() == "{}\n"
    assert sorted(p.name for p in places["root"].iterdir()) == ["stats.json"]  # no temp left


def test_a_link_at_the_temporary_name_is_never_opened(places, monkeypatch):
    """The temporary name is random; even one guessed (here: forced) and planted is not
    opened: O_CREAT|O_EXCL|O_NOFOLLOW fails on it and another name is drawn."""
    names = iter(["planted", "fresh"])
    monkeypatch.setattr(safe_write.secrets, "token_hex", lambda _n: next(names))
    (places["root"] / ".data.jsonl.planted.tmp").symlink_to(places["victim"])
    write_text(places["root"] / "data.jsonl", "line\n", roots=[places["root"]])
    assert places["victim"].read_text() == SECRET
    assert (places["root"] / "data.jsonl").read_text() == "line\n"


def test_a_folder_that_is_a_link_leaving_the_roots_is_refused(places):
    link = places["root"] / "out"
    link.symlink_to(places["outside"])
    with pytest.raises(PathOutsideRootsError, match=r"^out_dir: .*outside") as refused:
        write_text(link / "victim", "x", field="out_dir", roots=[places["root"]])
    assert refused.value.field == "out_dir"
    assert sorted(p.name for p in places["outside"].iterdir()) == ["victim"]
    assert places["victim"].read_text() == SECRET
    # a link that stays inside the roots is a folder like any other
    (places["root"] / "real").mkdir()
    (places["root"] / "alias").symlink_to(places["root"] / "real")
    write_text(places["root"] / "alias" / "f", "ok", roots=[places["root"]])
    assert (places["root"] / "real" / "f").read_text() == "ok"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(places):
    path = places["root"] / "results.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_writer(path) as handle:
        handle.write(b"half")
        raise RuntimeError("the writer failed")
    assert path.read_text() == "old"
    assert sorted(p.name for p in places["root"].iterdir()) == ["results.json"]


def test_the_file_is_created_as_open_would(places):
    umask = os.umask(0o022)
    try:
        path = write_text(places["root"] / "f.txt", "x")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_published_model_goes_through_no_link(tmp_path, monkeypatch):
    """The learner's `publish` (a job's `model_path`): links at the name and at the old
    predictable temporary name are left alone, the copy lands as a regular, recorded file."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    from llmrl.common import paths, trusted
    from llmrl.learner.versions import publish

    home = tmp_path / "home"
    monkeypatch.setenv("LLMRL_HOME", str(home))
    monkeypatch.delenv(paths.ARTIFACT_ROOTS_ENV, raising=False)  # the tests' folders are, usually
    monkeypatch.setattr(paths, "_process_roots", [])
    model = home / "line" / "1" / "model.zip"
    model.parent.mkdir(parents=True)
    PPO("MlpPolicy", gym.make("CartPole-v1"), n_steps=32, batch_size=32, device="cpu").save(model)
    trusted.record(model)
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_text(SECRET)
    destination = home / "models" / "m.zip"
    destination.parent.mkdir()
    destination.symlink_to(victim)
    (destination.parent / f".m.zip.{os.getpid()}.tmp").symlink_to(victim)
    publish(model, destination)
    assert victim.read_text() == SECRET
    assert not destination.is_symlink() and destination.read_bytes() == model.read_bytes()
    assert trusted.is_recorded(destination)
    escape = home / "escape"
    escape.symlink_to(victim.parent)
    with pytest.raises(PathOutsideRootsError, match="model_path"):
        publish(model, escape / "m.zip")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim"]
