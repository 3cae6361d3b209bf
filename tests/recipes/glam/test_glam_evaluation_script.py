"""evaluation/glam.py refuses a bad setting by its key, before it trains anything, and reports
seeds run by separate processes as one table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation" / "glam.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--microbatch-size", "0"], "config.microbatch_size: Input should be greater than"),
        (["--name", "a b"], "invalid experiment: name: String should match pattern"),
    ],
)
def test_bad_settings_are_refused_by_key(args, message, tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--methods", "npae", "--out", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "invalid GLAM sweep: " in done.stderr and message in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing planned, run or written (gateway.yaml)


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def test_seeds_run_apart_are_reported_as_one_table(tmp_path):
    """Two processes each run one seed; --report-only reads both, runs nothing."""
    common = ["--methods", "random", "--eval-episodes", "3", "--name", "apart"]
    for seed in ("1", "2"):
        done = run_script(*common, "--seeds", seed, "--out", str(tmp_path / seed))
        assert done.returncode == 0, done.stderr
    before = sorted(p.name for p in (tmp_path / "1").iterdir())
    merge = ["--merge", f"{tmp_path / '2'}:apart"]
    out = ["--out", str(tmp_path / "1"), "--report-only"]
    done = run_script(*common, "--seeds", "1", "2", *out, *merge)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| random "))
    cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
    assert cells[:2] == ["random", "train"] and cells[7] == "2"  # the seeds column
    assert "seeds [1, 2]" in done.stdout
    # seed 2 was read from its own sweep, not run again beside seed 1
    assert sorted(p.name for p in (tmp_path / "1").iterdir()) == before
    missing = run_script(*common, "--seeds", "3", *out)
    assert missing.returncode == 1 and "run them first" in missing.stderr


def test_a_report_on_a_directory_without_runs_creates_nothing(tmp_path):
    typo = tmp_path / "no-such-sweep"
    done = run_script("--methods", "random", "--out", str(typo), "--report-only")
    assert done.returncode == 1 and "run them first" in done.stderr
    assert not typo.exists()
