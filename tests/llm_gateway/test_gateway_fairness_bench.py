"""bench/gateway_fairness.py end to end with tiny counts: the gateway as a service per mode, two
issued keys (one bursting, one probing), and the JSON report's last line. No assertion on how
fast anything was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "gateway_fairness.py"


def test_the_fairness_bench_reports_each_modes_ratios() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--burst", "6", "--burst-tokens", "4", "--probes", "3",
         "--settle", "0.3", "--modes", "off,on"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert set(report["modes"]) == {"off", "on"} and report["burst"] == 6
    for mode, figures in report["modes"].items():
        assert figures["idle"]["n"] == figures["burst"]["n"] == 3, mode
        assert figures["p50_ratio"] > 0 and figures["p99_ratio"] > 0
        assert figures["burst_outcomes"].get("served", 0) > 0, figures
    # with the limits off no burst request is refused; with them on, over 4 in flight are
    assert set(report["modes"]["off"]["burst_outcomes"]) == {"served"}
    assert report["modes"]["on"]["limits"] == "defaults"
    assert set(report["goal_p50_within_2x"]) == {"off", "on"}
    assert "burst p50" in completed.stdout
