"""Versioned checkpoints: numbered and named versions, latest and next, whole replacement, and
the adapters' layout the gateway reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmrl.learner.adapters import adapter_dir, adapter_versions, served_name
from llmrl.learner.versions import (
    METADATA_FILE,
    Checkpoint,
    Versions,
    find_checkpoint,
    home_versions,
    publish,
)


def write_text(name: str, text: str):
    return lambda directory: (directory / name).write_text(text)


def test_versions_number_themselves_and_the_latest_is_the_highest(tmp_path: Path):
    line = Versions(tmp_path / "policies" / "doorkey")
    assert line.versions() == [] and line.latest_version() is None
    assert line.next_version() == "1"
    with pytest.raises(FileNotFoundError, match="no versions saved"):
        line.latest()

    first = line.save(write_text("w.txt", "one"), "ppo", config={"lr": 0.1}, result={"n": 1})
    named = line.save(write_text("w.txt", "best"), "ppo", version="best")
    second = line.save(write_text("w.txt", "two"), "ppo")
    tenth = line.save(write_text("w.txt", "ten"), "ppo", version=10)

    assert (first.version, second.version, named.version, tenth.version) == ("1", "2", "best", "10")
    assert line.versions() == ["best", "1", "2", "10"]  # numbers by number, after names
    assert line.latest() == tenth and line.next_version() == "11"
    assert first.algorithm == "ppo" and first.config == {"lr": 0.1} and first.result == {"n": 1}
    metadata = json.loads((first.path / METADATA_FILE).read_text())
    assert metadata["version"] == "1" and metadata["algorithm"] == "ppo"
    assert (line.get(2).path / "w.txt").read_text() == "two"
    assert find_checkpoint(line.root) == tenth  # a line means its latest version
    assert find_checkpoint(first.path) == first


def test_a_version_written_again_is_replaced_whole(tmp_path: Path):
    line = Versions(tmp_path)
    line.save(write_text("old.txt", "x"), "sft", version="1")
    again = line.save(write_text("new.txt", "y"), "sft", version="1")
    assert sorted(p.name for p in again.path.iterdir()) == [METADATA_FILE, "new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["1"]  # no staging directory left


def test_a_failed_save_leaves_nothing_behind(tmp_path: Path):
    line = Versions(tmp_path)

    def crash(directory: Path) -> None:
        (directory / "half.bin").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        line.save(crash, "ppo")
    assert line.versions() == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b"])
def test_a_bad_version_name_is_refused_naming_the_field(tmp_path: Path, bad: str):
    with pytest.raises(ValueError, match="version"):
        Versions(tmp_path).path(bad)


def test_reading_a_missing_checkpoint_names_the_path(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        Checkpoint.read(tmp_path / "nowhere")


def test_a_published_file_is_the_latest_version_at_a_fixed_path(tmp_path: Path):
    line = Versions(tmp_path / "models" / "doorkey")
    fixed = tmp_path / "models" / "doorkey.zip"
    for text in ("one", "two"):
        checkpoint = line.save(write_text("model.zip", text), "ppo")
        assert publish(checkpoint.path / "model.zip", fixed) == fixed
        assert fixed.read_text() == text
    assert line.versions() == ["1", "2"]
    assert (line.get(1).path / "model.zip").read_text() == "one"  # versions stay as saved
    assert sorted(p.name for p in fixed.parent.iterdir()) == ["doorkey", "doorkey.zip"]


def test_adapters_keep_the_layout_the_gateway_reads(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    assert adapter_dir("smollm2", "mine", 3) == tmp_path / "adapters" / "smollm2" / "mine" / "3"
    assert adapter_versions("smollm2", "mine").root == tmp_path / "adapters" / "smollm2" / "mine"
    assert home_versions("policies", "doorkey").root == tmp_path / "policies" / "doorkey"
    assert served_name("smollm2", "mine", 3) == "smollm2:mine@3"
