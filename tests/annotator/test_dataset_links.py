"""The files the annotator writes in a dataset's `out_dir` never follow a link planted there.

The probe: `confine` checked the folder a request names, not the files written in it, so a
link at `<out_dir>/dataset.stats.json` or at the temporary `<name>.jsonl.tmp` made
`POST /datasets/bootstrap` write or truncate a file outside every root. Now each file is
created fresh beside its name (O_CREAT|O_EXCL|O_NOFOLLOW) and renamed onto it: a link at the
name is replaced by the dataset's file, the file it pointed to is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from llmrl.annotator.service import create_app
from llmrl.common.episodes import write_jsonl
from llmrl.common.paths import DATA_ROOTS_ENV
from llmrl.recipes.llm_personalize.demonstrations import demonstration_episode

SECRET = "do not touch\n"


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A home and a data root, and a folder outside both holding the files links aim at."""
    folders = {name: tmp_path / name for name in ("home", "data", "outside")}
    for folder in folders.values():
        folder.mkdir()
    monkeypatch.setenv("LLMRL_HOME", str(folders["home"]))
    monkeypatch.setenv(DATA_ROOTS_ENV, str(folders["data"]))
    log = folders["data"] / "demos.jsonl"
    write_jsonl(log, [demonstration_episode(seed=0, env_kwargs={"max_steps": 40})])
    return {**folders, "log": log}


@pytest.fixture
def annotator(roots: dict[str, Path]):
    app = create_app(roots["home"] / "jobs", learner_url="http://127.0.0.1:9")
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def victim(roots: dict[str, Path], name: str) -> Path:
    path = roots["outside"] / name
    path.write_text(SECRET)
    return path


@pytest.mark.parametrize("planted", ["dataset.stats.json", "dataset.jsonl", "dataset.jsonl.tmp"])
def test_a_link_at_a_file_name_in_out_dir_is_never_followed(annotator, roots, planted):
    out = roots["data"] / "out"
    out.mkdir()
    target = victim(roots, "victim")
    (out / planted).symlink_to(target)
    response = annotator.post(
        "/datasets/bootstrap", json={"episodes": [str(roots["log"])], "out_dir": str(out)}
    )
    assert target.read_text() == SECRET  # neither written nor truncated
    assert response.status_code < 500, response.text
    if response.status_code == 200:  # the dataset's files landed as regular files
        for name in ("dataset.jsonl", "dataset.stats.json"):
            assert (out / name).is_file() and not (out / name).is_symlink()
            assert (out / name).read_text() != SECRET
    else:
        assert response.status_code in (400, 422) and "out_dir" in response.text
    assert sorted(p.name for p in roots["outside"].iterdir()) == ["victim"]


def test_links_at_every_name_at_once_leave_the_outside_alone(annotator, roots):
    out = roots["data"] / "out"
    out.mkdir()
    names = ("set.jsonl", "set.stats.json", "set.jsonl.tmp", "set.stats.json.tmp")
    targets = [victim(roots, f"victim-{i}") for i in range(len(names))]
    for name, target in zip(names, targets, strict=True):
        (out / name).symlink_to(target)
    body = {"episodes": [str(roots["log"])], "out_dir": str(out), "name": "set"}
    response = annotator.post("/datasets/bootstrap", json=body)
    assert response.status_code == 200, response.text
    assert all(target.read_text() == SECRET for target in targets)
    assert not (out / "set.jsonl").is_symlink() and (out / "set.jsonl").stat().st_size > 0


def test_an_out_dir_swapped_for_a_link_after_the_check_is_refused(roots):
    """The request was checked while out_dir was a folder; a link leaving the roots took its
    place before the write: nothing is written outside, the refusal names out_dir."""
    from llmrl.annotator.datasets import DatasetError
    from llmrl.recipes.llm_personalize.datasets import BootstrapRequest, bootstrap_builder

    out = roots["data"] / "out"
    out.mkdir()
    request = BootstrapRequest(episodes=[str(roots["log"])], out_dir=str(out))
    out.rmdir()
    out.symlink_to(roots["outside"])
    with pytest.raises(DatasetError, match=r"^out_dir: .*outside") as refused:
        bootstrap_builder(request)
    assert refused.value.field == "out_dir"
    assert list(roots["outside"].iterdir()) == []
