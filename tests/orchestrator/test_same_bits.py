"""Same seed, same bits: a run gives byte-identical rows embedded, with `--jobs 2`, and through
`llmrl up` (two rollout workers), whatever its LLM calls shared a batch with.

The LLM is the tiny random Llama served by the gateway's local backend (float32, its
`deterministic` scoring), with the cache off so every call is computed again in each mode. Each
mode runs in its own LLMRL_HOME. Besides the rows, every LLM answer of each run (the gateway's
call log beside its ledger: SQLite embedded, Redis as a service) must be the same bits: rows
of argmax choices could hide a last-bit difference, the answers cannot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support.net import free_port
from support.processes import REPO, child_env, wait_until
from support.tiny_llm import tiny_gateway_settings

from llmrl.common.config import DEFAULT_PORTS
from llmrl.llm_gateway.ledger_store import LedgerStore, RedisLedgerStore, SqliteLedgerStore
from llmrl.orchestrator.launcher import redis_url_with_password
from llmrl.orchestrator.rest_client import OrchestratorClient

pytestmark = pytest.mark.slow

TOKEN = "same-bits-t0ken"
REDIS_PASSWORD = "same-bits-redis-passw0rd"
SEEDS = (0, 1)
# When2Ask with the local LLM planner (the gateway scores the feasible skills), 4 envs at once
# so that their planner queries meet in the gateway's batches
WHEN2ASK = [
    "when2ask",
    "envs=[[SimpleDoorKey]]",
    "planner=local",
    "train_steps=256",
    "never_ask_steps=0",
    "n_envs=4",
    "n_steps=64",
    "eval_episodes=4",
    "max_steps=40",
    "methods=[[always,learned]]",
    f"seeds=[{','.join(map(str, SEEDS))}]",
]


def gateway_config(tiny_model_dir: Path, folder: Path) -> Path:
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir, cache="none")))
    return path


def comparable(results: dict[str, Any]) -> str:
    """What must repeat: the table and the curves, as bytes (provenance and timings may not)."""
    return json.dumps({k: results.get(k) for k in ("rows", "curves")}, sort_keys=True)


def answers(store: LedgerStore, run_id: str) -> dict[str, str]:
    """Every LLM call of the run: its cache key -> its answer, as canonical JSON."""
    calls, _ = store.run_calls(run_id)
    return {call["key"]: json.dumps(call["answer"], sort_keys=True) for call in calls}


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


Outcome = dict[int, tuple[str, dict[str, str]]]  # seed -> (rows and curves, LLM answers)


def sweep(env: dict[str, str], *options: str) -> None:
    """`llmrl sweep` of WHEN2ASK with `options`, in a process of its own; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "llmrl.cli", "sweep", *WHEN2ASK, *options],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def embedded_rows(home: Path, config: Path, out: Path, jobs: int) -> Outcome:
    env = child_env({"LLMRL_HOME": str(home), "LLMRL_LLM_GATEWAY_CONFIG": str(config)})
    sweep(env, "--out", str(out), "--quiet", "--jobs", str(jobs))
    store = SqliteLedgerStore(home / "llm_ledger.sqlite")
    rows = {}
    for path in sorted((out / "runs").glob("*/results.json")):
        results = json.loads(path.read_text())
        run_id = path.parent.name
        rows[int(run_id.rsplit("-s", 1)[1])] = (comparable(results), answers(store, run_id))
    store.close()
    assert sorted(rows) == list(SEEDS)
    return rows


def service_rows(home: Path, config: Path) -> Outcome:
    ports = {f"LLMRL_{s.upper()}_PORT": str(free_port()) for s in DEFAULT_PORTS}
    ports.update(
        {f"LLMRL_{s.upper()}_GRPC_PORT": str(free_port()) for s in ("simulator", "llm_gateway")}
    )
    env = child_env(
        {
            **ports,
            "LLMRL_TOKEN": TOKEN,
            "LLMRL_LLM_GATEWAY_CONFIG": str(config),
            "LLMRL_REDIS_PASSWORD": REDIS_PASSWORD,
        }
    )
    redis_port = free_port()
    command = [sys.executable, "-m", "llmrl.cli", "up", "--workers", "2", "--home", str(home)]
    up = subprocess.Popen(
        [*command, "--redis-port", str(redis_port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{ports['LLMRL_ORCHESTRATOR_PORT']}"
    try:

        def ready() -> bool:
            assert up.poll() is None, up.stdout.read() if up.stdout else ""
            try:
                return httpx.get(f"{url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 150, "llmrl up: the orchestrator healthy", interval=0.3)
        sweep(env, "--url", url, "--wait")
        client = OrchestratorClient(url, token=TOKEN)
        store = RedisLedgerStore(redis_url_with_password(redis_port, REDIS_PASSWORD))
        rows = {}
        for listed in client.runs():
            run = client.run(listed["run_id"])
            assert run["status"] == "completed", run
            results = json.loads(client.artifact(run["run_id"], "results.json"))
            calls = settled_answers(store, run["run_id"])
            rows[int(run["config"]["seed"])] = (comparable(results), calls)
        store.close()
        client.close()
        assert sorted(rows) == list(SEEDS)
        return rows
    finally:
        up.terminate()
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()


def test_when2ask_with_an_llm_planner_gives_the_same_bits_embedded_with_jobs_and_as_services(
    tiny_model_dir: Path, tmp_path: Path
):
    config = gateway_config(tiny_model_dir, tmp_path)
    one_by_one = embedded_rows(tmp_path / "home-1", config, tmp_path / "sweep-1", jobs=1)
    two_at_once = embedded_rows(tmp_path / "home-2", config, tmp_path / "sweep-2", jobs=2)
    services = service_rows(tmp_path / "home-up", config)
    for seed in SEEDS:
        rows, calls = one_by_one[seed]
        assert calls, f"seed {seed}: the run asked the LLM nothing"
        for mode, outcome in (("--jobs 2", two_at_once), ("llmrl up", services)):
            other_rows, other_calls = outcome[seed]
            assert other_calls.keys() == calls.keys(), f"seed {seed}: {mode} asked otherwise"
            differing = [key for key in calls if other_calls[key] != calls[key]]
            assert not differing, f"seed {seed}: {mode} answered {len(differing)} calls otherwise"
            assert other_rows == rows, f"seed {seed}: {mode} gave other rows"
    assert one_by_one[0] != one_by_one[1]  # the seeds play different games: not a constant
