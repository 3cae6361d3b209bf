"""evaluation/glam.py refuses a bad setting by its key, before it trains anything."""

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
