"""Across CPUs, for runs kept as bundles: does this machine give their rows (and answers) again?

Replays each bundle in research/replay/ made on another CPU than this one (another model
name or other kernel-choosing ISA flags), under the numerics the bundle's run recorded
(`LLMRL_PRECISION`, `LLMRL_ADAM`, each CPU path pin: set for the replay whatever this shell
has), each in a fresh LLMRL_HOME. A bundle replays with no model loaded; one whose recipe
trains its own LLM (KALM's grounding, GLAM, LLM-Personalize) cannot, so where the plain
replay fails it is recomputed whole (`llmrl replay --recompute`: this machine's models answer,
and each answer's bits are compared with the bundle's). Prints a line per bundle; the last
line is one JSON object: where it ran, per bundle the CPU it was made on, the settings, how it
replayed, whether every row (and answer) was the recorded one, and the minutes it took.
Exit 0 when every bundle gave its rows (and recomputed answers) again, 1 otherwise.

    python bench/replay_across_cpus.py                 # minutes: bundles from the other kind
    python bench/replay_across_cpus.py --all           # this CPU's own bundles too
    python bench/replay_across_cpus.py --bundles research/replay/<file> ...
    python bench/replay_across_cpus.py --recompute     # every answer computed here, compared
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llmrl.common.numerics import environment_of
from llmrl.common.provenance import cpu_model, isa_flags
from llmrl.llm_gateway.replay_bundle import Bundle, read_bundle

REPO = Path(__file__).resolve().parents[1]
BUNDLES = REPO / "research" / "replay"


def made_elsewhere(bundle: Bundle) -> bool:
    """Whether the bundle's run was made on another CPU than this one."""
    recorded = bundle.provenance
    return (recorded.get("cpu"), recorded.get("isa")) != (cpu_model(), isa_flags())


def recorded_environment(bundle: Bundle) -> dict[str, str]:
    """The variables that give a process the numerics the bundle's run computed with
    (`environment_of`); a run recorded before numerics were stated gives none: it replays under
    this shell's."""
    numerics = bundle.provenance.get("numerics")
    return environment_of(numerics) if isinstance(numerics, dict) else {}


# one replay in a process of its own (the pins and MKL's branch are read when torch loads): its
# outcome as one JSON line, from llmrl's own report rather than the command's wording
REPLAY = """
import json, sys
from llmrl.common.numerics import pin_cpu_paths
pin_cpu_paths()
from llmrl.llm_gateway.replay_bundle import BundleError
from llmrl.orchestrator.embedded import RunFailed
from llmrl.orchestrator.replay import replay
try:
    report = replay(sys.argv[1], out_dir=sys.argv[2], progress=False, recompute=sys.argv[3] == "1")
except (BundleError, RunFailed) as exc:
    print(json.dumps({"failed": str(exc)[-600:]}))
    raise SystemExit(0)
answers = report.answers
same_answers = answers and [answers.compared - answers.differing_count, answers.compared]
print(json.dumps({
    "rows_same": not report.differences,
    "differences": report.differences[:3],
    "answers_same": same_answers,
    "same": report.identical,
}))
"""


def replay_once(path: Path, settings: dict[str, str], work: Path, recompute: bool) -> dict:
    """One replay of the bundle at `path` in a fresh home under `settings`: its outcome."""
    out = Path(tempfile.mkdtemp(prefix=path.name.split(".")[0] + "-", dir=work))
    env = {**os.environ, **settings, "LLMRL_HOME": str(out / "home")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", REPLAY, str(path), str(out / "run"), "1" if recompute else "0"],
        env=env,
        capture_output=True,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    try:
        outcome = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except json.JSONDecodeError:
        outcome = None
    if outcome is None:  # the process itself died: its last words
        outcome = {"failed": " | ".join(done.stderr.strip().splitlines()[-4:])[-600:]}
    return {
        "mode": "recompute" if recompute else "replay",
        "same": False,
        **outcome,
        "minutes": round((time.monotonic() - started) / 60, 1),
    }


def check_bundle(path: Path, work: Path, recompute: bool = False) -> dict[str, Any]:
    bundle = read_bundle(path)
    recorded = bundle.provenance
    entry: dict[str, Any] = {
        "made_on": f"{recorded.get('cpu')} ({' '.join(recorded.get('isa') or [])})",
        "recipe": bundle.run.recipe,
        "settings": recorded_environment(bundle),
    }
    outcome = replay_once(path, entry["settings"], work, recompute=recompute)
    if recompute or "failed" not in outcome:
        return {**entry, **outcome}
    # the run could not be answered from the bundle (its recipe trains its LLM): recompute it
    again = replay_once(path, entry["settings"], work, recompute=True)
    return {**entry, "replay": outcome, **again}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bundles",
        nargs="+",
        type=Path,
        default=None,
        help="bundles to replay (default: every one in research/replay made on another CPU)",
    )
    parser.add_argument(
        "--all", action="store_true", help="this CPU's own bundles too (by default, skipped)"
    )
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="recompute every bundle (this machine's models answer each call, its bits compared "
        "with the bundle's), not only those that cannot replay",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for the replays (default: a temporary one)"
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="replay-across-cpus-"))
    work.mkdir(parents=True, exist_ok=True)
    paths = args.bundles or sorted(BUNDLES.glob("*.llmrl.json.gz"))
    if not (args.bundles or args.all):
        paths = [path for path in paths if made_elsewhere(read_bundle(path))]
    bundles = {}
    for path in paths:
        bundles[path.name] = check_bundle(path, work, args.recompute)
        entry = bundles[path.name]
        verdict = "the same" if entry["same"] else "differs"
        same, compared = entry.get("answers_same") or (None, None)
        verdict += f": {entry['failed']}" if "failed" in entry else ""
        answers = f", {same} of {compared} answers the same" if compared is not None else ""
        print(f"{path.name}: {verdict} ({entry['mode']}{answers})", flush=True)
    report = {
        "cpu": cpu_model(),
        "isa": isa_flags(),
        "bundles": bundles,
        "all_same": bool(bundles) and all(entry["same"] for entry in bundles.values()),
    }
    print(json.dumps(report))
    sys.exit(0 if report["all_same"] else 1)


if __name__ == "__main__":
    main()
