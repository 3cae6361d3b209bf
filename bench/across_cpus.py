"""Across CPUs: does this machine give the kept reports' rows, and the kept fingerprint's bits?

Runs every small experiment file that has a kept report (each recipe's `quick.yaml` and the
evaluate demo, by default) with `llmrl sweep`, each in a fresh LLMRL_HOME (an empty LLM
cache, as the kept runs had), then `llmrl results check`'s comparison of each run's rows with
the kept ones, and `llmrl numerics fingerprint` against a fingerprint kept from another
machine (research/numerics/). Prints a table; the last line is one JSON object: where it
ran, per file whether its rows were the same (and the first differing cells), the ops whose
bits differ. Exit 0 when every file and op matched, 1 otherwise.

    python bench/across_cpus.py                                   # about an hour on 2 cores
    python bench/across_cpus.py --files glam/quick evaluate/demo  # <recipe>/<name> only
    python bench/across_cpus.py --fingerprint research/numerics/2026-12-06-intel-xeon.json

A file whose data is not here (LLM-Personalize's Housekeep: LLMRL_HOUSEKEEP_DATA) is
reported as failed with the sweep's last words, not skipped silently. The quick files fit 15
minutes each on 2 cores; their runs keep their own bits whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from llmrl.common.numerics import cpu_pins
from llmrl.common.provenance import cpu_model, isa_flags
from llmrl.orchestrator.experiment_files import RECIPES_DIR
from llmrl.orchestrator.numerics_fingerprint import compare, read_fingerprint
from llmrl.orchestrator.repeat_check import check_against_kept
from llmrl.orchestrator.stored_results import stored_path
from llmrl.recipes.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
FINGERPRINTS = REPO / "research" / "numerics"
SHOWN_CELLS = 3  # differing cells a file's entry keeps


def small_files() -> list[str]:
    """Every quick file with a kept report, and the evaluate demo: `<recipe>/<name>`."""
    names = [f"{p.parent.parent.name}/quick" for p in RECIPES_DIR.glob("*/experiments/quick.yaml")]
    names.append("evaluate/demo")
    return sorted(n for n in names if stored_path(experiment_path(n)).is_file())


def experiment_path(name: str) -> Path:
    recipe, _, stem = name.partition("/")
    return RECIPES_DIR / recipe / "experiments" / f"{stem}.yaml"


def llmrl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMRL_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "llmrl.cli", *args], env=env, capture_output=True, text=True
    )


def repeat_file(name: str, work: Path) -> dict[str, Any]:
    """Sweep one file in a fresh home and compare its rows with the kept report's."""
    path, out = experiment_path(name), work / name.replace("/", "-")
    done = llmrl("sweep", "--config", str(path), "--out", str(out), "--quiet", home=out / "home")
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        return {"same": False, "failed": " | ".join(last)[-400:]}
    try:
        checks = check_against_kept(out, path)
    except ConfigError as exc:
        return {"same": False, "failed": str(exc)}
    made = [check for check in checks if check.here_on is not None]
    cells = [f"{c.run_id}: {line}" for c in made for line in c.differences][:SHOWN_CELLS]
    return {
        "same": all(check.same for check in made),
        "runs": len(made),
        "kept_on": sorted({check.kept_on for check in checks}),
        "differences": cells,
    }


def fingerprint_against(kept: Path, work: Path) -> dict[str, Any]:
    """This machine's fingerprint (by the llmrl command, so pinned as runs are) against `kept`."""
    mine = work / "fingerprint.json"
    llmrl("numerics", "fingerprint", "--out", str(mine), home=work / "home-fingerprint")
    if not mine.is_file():
        return {"same": False, "failed": "the fingerprint was not written"}
    here, there = read_fingerprint(mine), read_fingerprint(kept)
    rows = compare(here, there)
    compared = [row for row in rows if row[3] is not None]
    differing = [row[0] for row in compared if not row[3]]
    return {
        "against": str(kept.relative_to(REPO)) if kept.is_relative_to(REPO) else kept.name,
        "there": f"{there.get('cpu')} ({' '.join(there.get('isa', []))})",
        "same": not differing,
        "here_numerics": here.get("numerics"),  # as the llmrl command pinned them
        "ops_compared": len(compared),
        "ops_differing": differing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--files",
        nargs="+",
        default=None,
        help="experiment files as <recipe>/<name> (default: every quick file with a kept "
        "report, and evaluate/demo)",
    )
    parser.add_argument(
        "--fingerprint",
        type=Path,
        default=None,
        help="a fingerprint kept from another machine (default: the newest in research/numerics "
        "from another CPU than this one, if any)",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for the sweeps (default: a temporary one)"
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="across-cpus-"))
    work.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in args.files or small_files():
        files[name] = repeat_file(name, work)
        print(f"{name}: {'same rows' if files[name]['same'] else 'differs'}", flush=True)
    kept = args.fingerprint or other_cpus_fingerprint()
    fingerprint = fingerprint_against(kept, work) if kept else {"same": None, "failed": "none"}
    report = {
        "cpu": cpu_model(),
        "isa": isa_flags(),
        "files": files,
        "fingerprint": fingerprint,
        "all_same": all(f["same"] for f in files.values()) and fingerprint["same"] is not False,
    }
    print(json.dumps(report))
    sys.exit(0 if report["all_same"] else 1)


def other_cpus_fingerprint() -> Path | None:
    """The newest fingerprint kept from a CPU other than this one (another model name or other
    kernel-choosing ISA flags: two Xeon generations share one model name) made with the pins
    this machine's runs take: a file kept unpinned, or with another MKL branch, tells other
    paths apart, not other CPUs."""
    here = (cpu_model(), isa_flags())
    for path in sorted(FINGERPRINTS.glob("*.json"), reverse=True):
        kept = read_fingerprint(path)
        pins = kept.get("numerics", {}).get("pins")
        if (kept.get("cpu"), kept.get("isa")) != here and pins == cpu_pins():
            return path
    return None


if __name__ == "__main__":
    main()
