"""Same seed, same bits, for an experiment file: its runs embedded one at a time, with `--jobs 2`
and through `llmrl up` (two rollout workers), each mode in an LLMRL_HOME of its own, must give
byte-identical rows and curves (each run's results.json) and the same bits for every LLM answer
(the gateway's call log beside its ledger: SQLite embedded, Redis as a service; rows of argmax
choices could hide a last-bit difference, the answers cannot).

Every mode serves the same models: `--gateway-config`, else the file's `gateway:` settings
over the built-in ones; a file's `threads` reaches the services too (OMP_NUM_THREADS), as an
embedded sweep applies it. Exit status 0 when every run repeats, 1 when one does not; the last
line printed is one JSON object: per mode, the runs whose rows or LLM answers differed.

    python bench/same_bits.py services/recipes/when2ask/experiments/quick.yaml
    python bench/same_bits.py services/recipes/glam/experiments/quick.yaml \\
        'methods=[[glam]]' train_steps=16 ppo.num_envs=2 ppo.num_steps=8 'seeds=[0,1]'
    python bench/same_bits.py FILE --modes jobs2           # embedded only: no `llmrl up`

The tests run it on each recipe's quick file at a small size with the tiny model
(tests/orchestrator/test_same_bits.py). It takes three times the file's budget and more.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from llmrl.common.config import DEFAULT_PORTS
from llmrl.common.store import RunStore
from llmrl.llm_gateway.ledger_store import LedgerStore, RedisLedgerStore, SqliteLedgerStore
from llmrl.llm_gateway.settings import CONFIG_ENV_VAR
from llmrl.orchestrator.experiment_files import load_experiment
from llmrl.orchestrator.launcher import redis_url_with_password
from llmrl.orchestrator.rest_client import OrchestratorClient
from llmrl.orchestrator.sources import STORE_FILE
from llmrl.recipes.config import ConfigError
from llmrl.recipes.results import computed_rows

MODES = ("jobs2", "up")  # compared with the embedded sweep of one run at a time
Run = dict[str, Any]  # one run's outcome: label, rows (and curves) as bytes, LLM answers


def comparable(results: dict[str, Any]) -> str:
    """What must repeat: the table and the curves, as bytes (provenance and timings may not)."""
    rows = computed_rows(results)  # without time measured on this machine (cpu_minutes...)
    return json.dumps({"rows": rows, "curves": results.get("curves")}, sort_keys=True)


def answers(store: LedgerStore, run_id: str) -> dict[str, str]:
    """Every LLM call of the run: its request -> its answer, both as canonical JSON. The run's
    own id becomes "<run>" in the request: the modes name a run otherwise (an embedded run
    after its experiment's digest, the orchestrator's with a timestamp too) and GLAM asks its
    trained adapter, named after the run, so the cache keys differ where the calls do not."""
    calls, _ = store.run_calls(run_id)
    return {
        json.dumps(call["request"], sort_keys=True).replace(run_id, "<run>"): json.dumps(
            call["answer"], sort_keys=True
        )
        for call in calls
    }


def run_key(config: dict[str, Any]) -> str:
    """A run across modes: its validated config (seed included), whatever its id."""
    return json.dumps(config, sort_keys=True)


def outcome(config: dict[str, Any], results: dict[str, Any], calls: dict[str, str]) -> Run:
    rows = comparable(results)
    digest = hashlib.sha256((rows + json.dumps(calls, sort_keys=True)).encode()).hexdigest()
    point = hashlib.sha256(run_key(config).encode()).hexdigest()[:8]  # a grid's runs apart
    return {
        "label": f"seed {config.get('seed')}, config {point}",
        "rows": rows,
        "calls": calls,
        "digest": digest[:16],  # tells the seeds' runs apart in the report
    }


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
    return value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sweep(arguments: list[str], env: dict[str, str], timeout: float) -> None:
    """`llmrl sweep` in a process of its own; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "llmrl.cli", "sweep", *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"llmrl sweep failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def embedded(arguments: list[str], env: dict[str, str], work: Path, jobs: int, timeout: float):
    """The sweep embedded, `jobs` runs at once, in a home of its own: run key -> outcome."""
    home, out = work / f"home-jobs{jobs}", work / f"sweep-jobs{jobs}"
    sweep([*arguments, "--out", str(out), "--quiet", "--jobs", str(jobs)],
          {**env, "LLMRL_HOME": str(home)}, timeout)  # fmt: skip
    runs, ledger = RunStore(out / STORE_FILE), SqliteLedgerStore(home / "llm_ledger.sqlite")
    try:
        found = {}
        for row in runs.list_runs():
            results = json.loads((out / "runs" / row.run_id / "results.json").read_text())
            found[run_key(row.config)] = outcome(row.config, results, answers(ledger, row.run_id))
        return found
    finally:
        runs.close()
        ledger.close()


def settled_answers(store: LedgerStore, run_id: str) -> dict[str, str]:
    """The run's answers once the gateway has written them all: it writes its call log behind
    its ledger (every half second), so read until two reads a second apart agree."""
    previous: dict[str, str] = {}

    def settled() -> dict[str, str] | None:
        nonlocal previous
        current = answers(store, run_id)
        done = current if current and current == previous else None
        previous = current
        return done

    return wait_until(settled, 60, f"the calls of {run_id}", interval=1.0)


def services(arguments: list[str], env: dict[str, str], work: Path, timeout: float):
    """The sweep submitted to `llmrl up --workers 2` (own home, ports, Redis): key -> outcome."""
    token, password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    ports = {f"LLMRL_{s.upper()}_PORT": str(free_port()) for s in DEFAULT_PORTS}
    ports.update(
        {f"LLMRL_{s.upper()}_GRPC_PORT": str(free_port()) for s in ("simulator", "llm_gateway")}
    )
    env = {**env, **ports, "LLMRL_TOKEN": token, "LLMRL_REDIS_PASSWORD": password}
    redis_port = free_port()
    command = [sys.executable, "-m", "llmrl.cli", "up", "--workers", "2"]
    command += ["--home", str(work / "home-up"), "--redis-port", str(redis_port)]
    log = (work / "up.log").open("w")
    up = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{ports['LLMRL_ORCHESTRATOR_PORT']}"
    try:

        def ready() -> bool:
            if up.poll() is not None:
                raise RuntimeError(f"llmrl up exited: see {work / 'up.log'}")
            try:
                return httpx.get(f"{url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 300, "llmrl up: the orchestrator healthy", interval=0.3)
        sweep([*arguments, "--url", url, "--wait"], env, timeout)
        client = OrchestratorClient(url, token=token)
        ledger = RedisLedgerStore(redis_url_with_password(redis_port, password))
        try:
            found = {}
            for listed in client.runs():
                run = client.run(listed["run_id"])
                if run["status"] != "completed":
                    raise RuntimeError(f"run {run['run_id']} {run['status']}: {run.get('error')}")
                results = json.loads(client.artifact(run["run_id"], "results.json"))
                calls = settled_answers(ledger, run["run_id"])
                found[run_key(run["config"])] = outcome(run["config"], results, calls)
            return found
        finally:
            ledger.close()
            client.close()
    finally:
        up.terminate()
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
        log.close()


def differences(reference: dict[str, Run], other: dict[str, Run]) -> dict[str, Any]:
    """What `other` did otherwise than `reference`, run by run."""
    if other.keys() != reference.keys():
        other_runs = "other runs (configs) than the embedded sweep's"
        return {"runs": other_runs, "rows_differ": [], "calls_differ": {}}
    rows, calls = [], {}
    for key, run in reference.items():
        theirs = other[key]
        if theirs["rows"] != run["rows"]:
            rows.append(run["label"])
        asked = theirs["calls"].keys() ^ run["calls"].keys()
        answered = [c for c in run["calls"].keys() & theirs["calls"].keys()
                    if theirs["calls"][c] != run["calls"][c]]  # fmt: skip
        if asked or answered:
            calls[run["label"]] = {
                "asked_otherwise": len(asked),
                "answered_otherwise": len(answered),
            }
    return {"rows_differ": rows, "calls_differ": calls}


def gateway_config(file: Path, given: Path | None, work: Path) -> Path:
    """The gateway settings every mode serves: `given`, else the file's over the built-in."""
    if given is not None:
        return given.resolve()
    path = work / "gateway.yaml"
    path.write_text(yaml.safe_dump(load_experiment(file).gateway or {}))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="the experiment file (e.g. a recipe's quick.yaml)")
    parser.add_argument(
        "overrides", nargs="*", help="key=value over the file's config, grid or seeds"
    )
    parser.add_argument(
        "--gateway-config",
        type=Path,
        default=None,
        help="gateway settings every mode serves (default: the file's over the built-in)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="compared with one run at a time embedded: jobs2 (--jobs 2), up (llmrl up)",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for the homes and sweeps (default: temp)"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds each sweep may take")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))}; known: {', '.join(MODES)}")
    try:  # a bad file or key fails here, before anything runs
        experiment = load_experiment(args.file, args.overrides)
    except (ConfigError, OSError) as exc:
        parser.error(str(exc))
    with tempfile.TemporaryDirectory(prefix="same-bits-") as scratch:
        work = (args.work or Path(scratch)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env[CONFIG_ENV_VAR] = str(gateway_config(args.file, args.gateway_config, work))
        if experiment.threads:
            env["OMP_NUM_THREADS"] = str(experiment.threads)  # the services' torch too
        arguments = ["--config", str(args.file.resolve()), *args.overrides]
        reference = embedded(arguments, env, work, 1, args.timeout)
        report: dict[str, Any] = {
            "file": str(args.file),
            "overrides": args.overrides,
            "runs": {run["label"]: run["digest"] for run in reference.values()},
            "calls": {run["label"]: len(run["calls"]) for run in reference.values()},
            "modes": {},
        }
        for mode in modes:
            if mode == "jobs2":
                other = embedded(arguments, env, work, 2, args.timeout)
            else:
                other = services(arguments, env, work, args.timeout)
            report["modes"][mode] = differences(reference, other)
    for mode, found in report["modes"].items():
        found["same_bits"] = not (
            found.get("runs") or found["rows_differ"] or found["calls_differ"]
        )
        print(f"{mode}: {'same bits' if found['same_bits'] else found}")
    report["same_bits"] = all(found["same_bits"] for found in report["modes"].values())
    print(json.dumps(report, sort_keys=True))
    return 0 if report["same_bits"] else 1


if __name__ == "__main__":
    sys.exit(main())
