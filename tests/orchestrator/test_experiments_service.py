"""Experiments on the services, with real processes (Redis, simulator over gRPC, orchestrator,
two rollout workers): POST /experiments runs a grid × seeds at most `max_parallel` at once,
survives a killed worker and a restarted orchestrator, aggregates over seeds, cancels, and
refuses bad specs without starting anything."""

from __future__ import annotations

import signal
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as scipy_stats
from support.processes import Stack, pending_of, wait_until

from llmrl.cli import main
from llmrl.orchestrator.rest_client import OrchestratorClient

SLOW_CORRIDOR = {"length": 4, "step_delay_s": 0.04}  # ~0.2 s per episode


@pytest.fixture
def client(stack: Stack):
    client = OrchestratorClient(stack.url)
    yield client
    client.close()


def door_key_experiment(**overrides: Any) -> dict[str, Any]:
    """2 configs (6 and 12 episodes) × 3 seeds of `evaluate` on SimpleDoorKey."""
    spec = {
        "name": "doorkey",
        "recipe": "evaluate",
        "config": {"env": "SimpleDoorKey", "planner": "oracle"},
        "grid": {"episodes": [6, 12]},
        "seeds": "0..2",
        "max_parallel": 2,
    }
    return {**spec, **overrides}


def running_runs(experiment: dict[str, Any]) -> int:
    return experiment["run_states"].get("running", 0) + experiment["run_states"].get("pending", 0)


def wait_experiment(client: OrchestratorClient, experiment_id: str) -> dict[str, Any]:
    """Follow the experiment to its end, checking it never runs more than max_parallel."""
    most = 0

    def ended() -> dict[str, Any] | None:
        nonlocal most
        experiment = client.experiment(experiment_id)
        most = max(most, running_runs(experiment))
        return experiment if experiment["status"] in ("completed", "failed", "cancelled") else None

    final = wait_until(ended, 240, f"experiment {experiment_id}", interval=0.05)
    assert most <= final["max_parallel"]
    return final


def assert_runs_exact(client: OrchestratorClient, experiment: dict[str, Any]) -> None:
    """Every run completed with exactly its episodes, each stored once."""
    for run in experiment["runs"]:
        assert run["status"] == "completed", run
        page = client.episodes(run["run_id"], limit=1000)
        ids = sorted(episode["episode_id"] for episode in page["episodes"])
        assert ids == sorted(f"evaluate/{i}" for i in range(run["config"]["episodes"]))


def test_an_experiment_runs_through_rest_survives_a_killed_worker_and_aggregates(stack, client):
    submitted = client.submit_experiment(door_key_experiment())
    experiment_id = submitted["experiment_id"]
    assert experiment_id.startswith("doorkey-") and submitted["runs_total"] == 6
    victim = stack.workers[0]
    wait_until(
        lambda: (
            client.experiment(experiment_id)["run_states"].get("completed", 0) >= 1
            and pending_of(stack, victim.name) == 1
        ),
        120,
        "a run completed and the victim worker holding a job",
        interval=0.005,
    )
    victim.kill(signal.SIGKILL)  # mid-experiment, holding an unacknowledged episode job
    final = wait_experiment(client, experiment_id)
    stack.workers.remove(victim)
    stack.add_worker("w3")
    assert final["status"] == "completed", final
    assert_runs_exact(client, final)

    runs = final["runs"]
    assert [(run["point"], run["seed"]) for run in runs] == [
        ({"episodes": e}, s) for e in (6, 12) for s in (0, 1, 2)
    ]
    aggregate = final["aggregate"]
    assert len(aggregate["runs"]) == 6
    assert [m["config"] for m in aggregate["methods"]] == ["episodes=6", "episodes=12"]
    for method, mine in zip(aggregate["methods"], (runs[:3], runs[3:]), strict=True):
        returns = [
            client.http.get(f"/runs/{run['run_id']}/artifacts/results.json").json()["rows"][0][
                "mean_return"
            ]
            for run in mine
        ]
        assert [run["summary"]["mean_return"] for run in mine] == returns
        sample = np.array(returns)
        interval = scipy_stats.bootstrap(
            (sample,), np.mean, confidence_level=0.95, method="percentile", rng=0
        ).confidence_interval
        got = method["metrics"]["mean_return"]
        assert got["values"] == returns
        assert got["mean"] == pytest.approx(sample.mean())
        assert (got["low"], got["high"]) == (
            pytest.approx(interval.low),
            pytest.approx(interval.high),
        )
        assert got["iqm"] == pytest.approx(scipy_stats.trim_mean(sample, 0.25))
    markdown = client.http.get(f"/experiments/{experiment_id}/report/results.md")
    assert markdown.status_code == 200 and "## Headline metrics" in markdown.text
    png = client.http.get(f"/experiments/{experiment_id}/report/curves.png")
    assert png.content[:4] == b"\x89PNG"
    assert client.http.get(f"/experiments/{experiment_id}/report/run.sqlite").status_code == 404
    for run in runs:  # the orchestrator's runs share the one TensorBoard root too
        link = stack.home / "tensorboard" / run["run_id"]
        assert link.resolve() == (stack.home / "runs" / run["run_id"] / "tb").resolve()
    listed = {e["experiment_id"]: e for e in client.experiments()}[experiment_id]
    assert listed["runs_total"] == 6 and listed["run_states"] == {"completed": 6}

    status = CliRunner().invoke(main, ["status", experiment_id, "--url", stack.url])
    assert status.exit_code == 0, status.output
    assert experiment_id in status.output and runs[5]["run_id"] in status.output
    assert "mean_return" in status.output  # the aggregate's headline table
    listing = CliRunner().invoke(main, ["runs", "--url", stack.url])
    assert listing.exit_code == 0 and runs[0]["run_id"] in listing.output
    compared = CliRunner().invoke(
        main, ["compare", experiment_id, "--url", stack.url, "--out", str(stack.home / "cmp")]
    )
    assert compared.exit_code == 0, compared.output
    assert (stack.home / "cmp" / "results.md").exists()


def episodes_stored(client: OrchestratorClient, experiment_id: str) -> int:
    runs = client.experiment(experiment_id)["runs"]
    return sum(client.run(r["run_id"])["episodes_stored"] for r in runs if r["status"] != "queued")


def slow_experiment(name: str, episodes: int, seeds: str, max_parallel: int) -> dict[str, Any]:
    return {
        "name": name,
        "recipe": "evaluate",
        "config": {"env": "TinyCorridor", "env_kwargs": SLOW_CORRIDOR},
        "grid": {"episodes": [episodes]},
        "seeds": seeds,
        "max_parallel": max_parallel,
    }


def test_cancelling_an_experiment_cancels_its_running_runs(stack, client):
    experiment_id = client.submit_experiment(slow_experiment("cancelme", 200, "0..5", 2))[
        "experiment_id"
    ]
    # both runs started; their jobs share one FIFO queue, so the first one plays first
    wait_until(
        lambda: (
            running_runs(client.experiment(experiment_id)) == 2
            and episodes_stored(client, experiment_id) >= 2
        ),
        60,
        "two runs started, episodes being played",
    )
    cancelled = CliRunner().invoke(main, ["cancel", experiment_id, "--url", stack.url])
    assert cancelled.exit_code == 0 and f"{experiment_id}: cancel requested" in cancelled.output
    assert client.experiment(experiment_id)["cancel_requested"] is True
    final = wait_experiment(client, experiment_id)
    assert final["status"] == "cancelled"
    states = [run["status"] for run in final["runs"]]
    assert states.count("cancelled") == 2 and states.count("queued") == 4
    for run in final["runs"]:
        if run["status"] == "cancelled":
            assert client.run(run["run_id"])["episodes_stored"] < 200
        else:  # never started: no run exists
            assert client.http.get(f"/runs/{run['run_id']}").status_code == 404
    again = client.http.post(f"/experiments/{experiment_id}/cancel")
    assert again.status_code == 409


def test_a_restarted_orchestrator_carries_on_with_the_experiment(stack, client):
    experiment_id = client.submit_experiment(slow_experiment("restart", 6, "0..2", 1))[
        "experiment_id"
    ]
    wait_until(lambda: episodes_stored(client, experiment_id) >= 2, 60, "the first run playing")
    stack.orchestrator.kill(signal.SIGKILL)
    stack.orchestrator.start()
    final = wait_experiment(client, experiment_id)
    assert final["status"] == "completed"
    assert_runs_exact(client, final)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"grid": {"nosuchkey": [1, 2]}}, "grid.nosuchkey: unknown config key"),
        ({"config": {"nosuchkey": 1}}, "config.nosuchkey: unknown config key"),
        ({"grid": {"episodes": []}}, "grid.episodes is an empty axis"),
        ({"seeds": "0..a"}, "seeds '0..a' is not a range"),
        ({"seeds": "3..1"}, "seeds '3..1' is an empty range"),
        ({"grid": {"episodes": list(range(1, 101))}}, "LLMRL_MAX_EXPERIMENT_RUNS"),
        ({"grid": {"episodes": [0, 1]}}, "config.episodes"),
        ({"recipe": "nosuchrecipe"}, "nosuchrecipe"),
        ({"max_parallel": 0}, "max_parallel"),
    ],
)
def test_bad_experiments_get_a_4xx_naming_the_field_and_start_nothing(
    stack, client, change: dict[str, Any], field: str
):
    runs_before = len(client.runs())
    experiments_before = len(client.experiments())
    response = client.http.post("/experiments", json=door_key_experiment(**change))
    assert response.status_code == 422, response.text
    assert field in response.text
    assert len(client.runs()) == runs_before
    assert len(client.experiments()) == experiments_before


def test_cli_submit_with_wait_follows_a_run_and_an_experiment_to_their_end(stack, capsys):
    from llmrl.orchestrator.rest_client import cli_submit, cli_submit_experiment

    config = {"env": "SimpleDoorKey", "planner": "oracle", "episodes": 2}
    cli_submit("evaluate", config, stack.url, wait=True)
    shown = capsys.readouterr().out
    assert "status" in shown and "completed" in shown and "summary.success_rate" in shown
    spec = door_key_experiment(name="cli", grid={"episodes": [2]}, seeds="0..0")
    cli_submit_experiment(spec, stack.url, wait=True)
    shown = capsys.readouterr().out
    assert "experiment cli-" in shown and ": completed" in shown and "1 completed" in shown


def test_a_failed_phase_says_why_in_the_sweep_and_in_the_status(stack, client, monkeypatch):
    """A run whose phase fails on the services: `llmrl sweep --url --wait` prints which run,
    which phase and the exception's message (and fails with them), `llmrl status` too."""
    bad = stack.home / "datasets" / "bad.npz"  # under the orchestrator's home: allowed
    bad.parent.mkdir(parents=True, exist_ok=True)
    np.savez(bad, observations=np.zeros((2, 10), np.float32))  # no actions, rewards...
    monkeypatch.setenv("LLMRL_HOME", str(stack.home))  # the sweep checks the path here first
    arguments = ["sweep", "kalm", f"dataset={bad}", "seeds=[0]", "--name", "baddata"]
    swept = CliRunner().invoke(main, [*arguments, "--url", stack.url, "--wait"])
    assert swept.exit_code == 1, swept.output
    experiment = next(e for e in client.experiments() if e["experiment_id"].startswith("baddata"))
    (run,) = client.experiment(experiment["experiment_id"])["runs"]
    assert (run["status"], run["current_phase"]) == ("failed", "data")
    assert run["error"].startswith("DatasetFormatError: ") and "bad.npz" in run["error"]
    assert "field 'actions' is missing" in run["error"]
    why = f"run {run['run_id']} (seed 0) failed in phase data: {run['error']}"
    assert why in swept.output  # printed after the runs' table, and in the failure's message
    assert f"failed: {why}" in swept.output
    status = CliRunner().invoke(main, ["status", run["run_id"], "--url", stack.url])
    assert status.exit_code == 0 and "field 'actions' is missing" in status.output
