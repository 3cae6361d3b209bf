"""Paths a request names stay under LLMRL_HOME or a configured data root."""

from __future__ import annotations

import pytest

from llmrl.common import paths
from llmrl.common.paths import DATA_ROOTS_ENV, PathOutsideRootsError, confine, data_roots


@pytest.fixture(autouse=True)
def no_process_roots(monkeypatch):
    """Roots an embedded run in this pytest process allowed (`allow_root`) are not these tests'."""
    monkeypatch.setattr(paths, "_process_roots", [])


def test_paths_under_home_or_a_data_root_resolve(tmp_path, monkeypatch):
    home, data = tmp_path / "home", tmp_path / "data"
    monkeypatch.setenv("LLMRL_HOME", str(home))
    monkeypatch.setenv(DATA_ROOTS_ENV, str(data))
    assert data_roots() == [home.resolve(), data.resolve()]
    assert confine(home / "runs" / "new" / "file.jsonl", "out_dir") == home / "runs/new/file.jsonl"
    assert confine(str(data / "a" / ".." / "b"), "data") == data / "b"


@pytest.mark.parametrize("escape", ["sibling", "home/../sibling", "link/secret", "/etc/passwd"])
def test_paths_leaving_every_root_are_refused_naming_the_field(tmp_path, monkeypatch, escape):
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "sibling").mkdir()
    (home / "link").symlink_to(tmp_path / "sibling")  # resolved, it leaves home
    monkeypatch.setenv("LLMRL_HOME", str(home))
    monkeypatch.setenv(DATA_ROOTS_ENV, str(tmp_path / "data"))
    path = escape if escape.startswith("/") else str(tmp_path / escape)
    if escape.startswith("link"):
        path = str(home / escape)
    with pytest.raises(PathOutsideRootsError, match=r"^out_dir: .* outside the folders") as caught:
        confine(path, "out_dir")
    assert caught.value.field == "out_dir"
    assert "sibling" not in str(caught.value).replace(path, "")  # only the path as given


def test_without_configured_roots_the_known_data_folders_are_allowed(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ROOTS_ENV, raising=False)
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLMRL_HOUSEKEEP_DATA", str(tmp_path / "housekeep"))
    monkeypatch.delenv("LLMRL_KALM_DATA", raising=False)
    roots = data_roots()
    assert roots[:2] == [(tmp_path / "home").resolve(), (tmp_path / "housekeep").resolve()]
    assert len(roots) == 2  # no folder beside the checkout, whatever the working directory
    fetched = tmp_path / "home" / "data" / "kalm"  # where `llmrl data get kalm` writes
    assert confine(fetched, "released_path") == fetched.resolve()
    with pytest.raises(PathOutsideRootsError):
        confine(tmp_path / "elsewhere", "data_dir")


def test_a_process_can_allow_its_own_output_folder(tmp_path, monkeypatch):
    from llmrl.common import paths

    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(DATA_ROOTS_ENV, str(tmp_path / "data"))
    monkeypatch.setattr(paths, "_process_roots", [])
    run = tmp_path / "runs" / "lp"
    with pytest.raises(PathOutsideRootsError):
        confine(run / "datasets" / "train.jsonl", "data")
    paths.allow_root(run)  # what `llmrl run --out runs/lp` does
    assert confine(run / "datasets" / "train.jsonl", "data") == run / "datasets" / "train.jsonl"
