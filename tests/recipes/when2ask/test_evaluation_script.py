"""evaluation/when2ask.py refuses a bad step cap or noise list by the option's name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation" / "when2ask.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-steps", "0"], "argument --max-steps: expected a positive integer, got '0'"),
        (["--max-steps", "x"], "argument --max-steps: expected a positive integer, got 'x'"),
        (["--noise-mode", "sometimes"], "argument --noise-mode: invalid choice"),
        (["--noise", "0.1,2"], "--noise: expected comma-separated numbers in [0, 1]"),
    ],
)
def test_bad_options_are_refused_by_name(args, message):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert message in done.stderr
