"""The wheel ships the code and its data, not the research record: the history experiment
files live in research/ at the repository root (issue 72), read at their own commits, and no
install should carry them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what setuptools reads to build the wheel, and the folder that must stay out of it
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "services", "research")


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The file names in a wheel built offline from a copy of the checkout (a copy: building in
    place writes build/ and the egg-info into a checkout others may be testing in)."""
    if not (ROOT / "research").is_dir():
        pytest.skip("no research/ folder: not a repository checkout")
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*command, "--no-index", "--quiet", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"pip wheel failed:\n{result.stdout}{result.stderr}"
    (wheel,) = out.glob("llmrl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_is_the_real_one(wheel_names: list[str]) -> None:
    """Code and package data (the YAML directly in a package) travel: a sanity check."""
    assert "llmrl/cli.py" in wheel_names
    assert "llmrl/llm_gateway/defaults.yaml" in wheel_names


def test_the_wheel_holds_no_history_experiment_file(wheel_names: list[str]) -> None:
    history = [name for name in wheel_names if "history" in Path(name).parts]
    research = sorted(p.name for p in (ROOT / "research").rglob("*") if p.is_file())
    shipped = [name for name in wheel_names if Path(name).name in research]
    assert not history, f"history files in the wheel: {history}"
    assert not shipped, f"research/ files in the wheel: {shipped}"
    assert not [name for name in wheel_names if name.startswith("research/")]
