"""`tracking:` sends a run to the trackers researchers use: real `evaluate` runs report to a
local MLflow store, to a real MLflow server (one that goes away mid-run too) and to an offline
W&B run, with their curves, config, results, plots and LLM totals; TensorBoard as before."""

from __future__ import annotations

import json
import logging
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import yaml
from click.testing import CliRunner
from support.net import free_port
from support.processes import wait_until
from support.tiny_llm import tiny_gateway_settings

from llmrl.cli import main
from llmrl.common.registry import registry
from llmrl.orchestrator.embedded import run_embedded
from llmrl.planners.base import Plan
from llmrl.planners.oracle import OraclePlanner
from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.tracking import TRACKING_SERVERS_VAR, flat_params, identity

mlflow_tracking = pytest.importorskip("mlflow.tracking")

EPISODES = 4
BASE = {"env": "SimpleDoorKey", "planner": "oracle", "episodes": EPISODES}


class MlflowServer:
    """`mlflow server` on a free port with a SQLite store and proxied artifacts, in its own
    process group (its workers end with it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--workers", "1"]
        command += ["--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}"]
        command += ["--artifacts-destination", str(self.root / "artifacts")]
        self.proc = subprocess.Popen(
            command,
            cwd=self.root,
            stdout=open(self.root / "server.log", "wb"),  # noqa: SIM115 - the child owns it
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self.healthy, 120, "mlflow server /health", interval=0.5)
        return self

    def healthy(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, (
            self.root / "server.log"
        ).read_text()[-3000:]
        try:
            return httpx.get(f"{self.url}/health", timeout=2).text.strip() == "OK"
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)


@pytest.fixture
def mlflow_server(tmp_path: Path):
    server = MlflowServer(tmp_path / "mlflow-server").start()
    yield server
    server.stop()


def episode_returns(out: Path) -> list[float]:
    lines = (out / "episodes" / "evaluate.jsonl").read_text().splitlines()
    return [json.loads(line)["episode_return"] for line in lines]


def the_mlflow_run(client: Any, experiment: str) -> Any:
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r}"
    (run,) = client.search_runs([found.experiment_id])
    return run


def assert_reported(client: Any, experiment: str, out: Path, run_id: str) -> Any:
    """The MLflow run holds the llmrl run's curves, config, provenance, results and plots."""
    run = the_mlflow_run(client, experiment)
    assert run.info.status == "FINISHED"
    assert run.data.tags["llmrl.run_id"] == run_id and run.info.run_name == run_id
    history = client.get_metric_history(run.info.run_id, "charts/episodic_return")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(1, EPISODES + 1))
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(
        episode_returns(out)
    )
    success = client.get_metric_history(run.info.run_id, "charts/success")
    assert [m.value for m in success] == [1.0] * EPISODES  # the oracle solves every seed
    params = run.data.params
    assert params["env"] == "SimpleDoorKey" and params["planner"] == "oracle"
    assert params["episodes"] == str(EPISODES) and params["tracking"] == "[mlflow]"
    assert run.data.tags["llmrl.provenance.mode"] == "embedded"
    assert "llmrl.provenance.python" in run.data.tags
    results = json.loads((out / "results.json").read_text())["rows"][0]
    metrics = run.data.metrics
    assert metrics["results/success_rate"] == 1.0
    assert metrics["results/mean_return"] == pytest.approx(results["mean_return"])
    assert metrics["llm/requests"] == 0 and metrics["llm/cost_usd"] == 0  # no LLM in the loop
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    artifacts |= {a.path for a in client.list_artifacts(run.info.run_id, "results")}
    assert artifacts == {"plots/evaluate.png", "results/results.json", "results/results.md"}
    plot = client.download_artifacts(run.info.run_id, "plots/evaluate.png", str(out.parent))
    assert Path(plot).read_bytes() == (out / "evaluate.png").read_bytes()
    return run


def test_a_run_reports_to_a_local_mlflow_store_in_its_out_dir(tmp_path: Path):
    out = tmp_path / "run"
    run = run_embedded("evaluate", {**BASE, "tracking": ["mlflow"]}, out_dir=out, progress=False)
    assert (out / "mlflow.db").is_file()
    client = mlflow_tracking.MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    assert_reported(client, "evaluate", out, run.run_id)
    assert not (out / "tb").exists()  # TensorBoard not selected: no tb folder


def test_a_run_reports_to_an_mlflow_server(
    tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(TRACKING_SERVERS_VAR, mlflow_server.url)  # the operator allows it
    out = tmp_path / "run"
    config = {**BASE, "tracking": "mlflow", "mlflow_tracking_uri": mlflow_server.url}
    config["mlflow_experiment"] = "tracking-test"
    run = run_embedded("evaluate", config, out_dir=out, progress=False)
    client = mlflow_tracking.MlflowClient(tracking_uri=mlflow_server.url)
    reported = assert_reported(client, "tracking-test", out, run.run_id)
    assert reported.data.params["mlflow_tracking_uri"] == mlflow_server.url
    assert not (out / "mlflow.db").exists()  # the server keeps it all

    # the same llmrl run again (resumed, here already complete) is the same MLflow run
    again = run_embedded("evaluate", config, out_dir=out, progress=False, reuse_completed=True)
    assert again.run_id == run.run_id
    assert the_mlflow_run(client, "tracking-test").info.run_id == reported.info.run_id


@registry.register_planner("test-tracking-server-stopper")
class ServerStopper(OraclePlanner):
    """The oracle; the tracking server goes away as episode `stop_at` starts."""

    server: ClassVar[MlflowServer | None] = None
    stop_at: ClassVar[int] = 2
    episodes_started: ClassVar[int] = 0

    def reset(self) -> None:
        cls = type(self)
        cls.episodes_started += 1
        if cls.episodes_started == cls.stop_at and cls.server is not None:
            cls.server.stop()

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        return super().plan(observation, t)


def test_the_mlflow_server_going_away_mid_run_warns_once_and_the_run_completes(
    tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch, caplog
):
    # MLflow's own client retries a refused connection for minutes by default
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv(TRACKING_SERVERS_VAR, mlflow_server.url)
    monkeypatch.setattr(ServerStopper, "server", mlflow_server)
    monkeypatch.setattr(ServerStopper, "episodes_started", 0)
    out = tmp_path / "run"
    config = {**BASE, "planner": "test-tracking-server-stopper", "episodes": 6}
    config |= {"tracking": "mlflow,tensorboard", "mlflow_tracking_uri": mlflow_server.url}
    with caplog.at_level(logging.WARNING, logger="llmrl.tracking"):
        run = run_embedded("evaluate", config, out_dir=out, progress=False)
    assert run.status == "completed"
    assert json.loads((out / "results.json").read_text())["rows"][0]["episodes"] == 6
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tb").iterdir())
    failures = [r for r in caplog.records if "mlflow tracking failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    assert "the run goes on without it" in failures[0].getMessage()


# -- W&B: an offline run in <out>/wandb -------------------------------------------------------
def wandb_records(run_dir: Path) -> list[Any]:
    """The records of an offline run's `run-<id>.wandb` file: W&B's LevelDB-style log (a
    7-byte header, 32 KiB blocks of chunks: crc32, length, type; FULL=1, FIRST=2, LAST=4)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("run-*.wandb")
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # a block's zero padding
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_run(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], set]:
    """History rows, final summary, config and saved files of the out dir's offline run."""
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    history, summary, config, files = [], {}, {}, set()
    for record in wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append(
                {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in record.history.item
                }
            )
        elif kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind in ("run", "config"):  # the config given to wandb.init, then updates
            updates = record.run.config.update if kind == "run" else record.config.update
            for item in updates:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "files":
            files |= {f.path for f in record.files.files}
    return history, summary, config, files


def test_llmrl_run_with_wandb_writes_an_offline_run_with_the_history_and_llm_totals(
    tiny_model_dir: Path, tmp_path: Path
):
    """The command line, an LLM planner on the tiny model: the offline run has a history row
    per episode, the results and the gateway ledger's totals in its summary, the plot."""
    gateway_config = tmp_path / "gateway.yaml"
    gateway_config.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir)))
    env = {**os.environ, "LLMRL_HOME": str(tmp_path / "home"), "LLMRL_LOG_LEVEL": "WARNING"}
    env["LLMRL_LLM_GATEWAY_CONFIG"] = str(gateway_config)
    env.pop("WANDB_MODE", None)
    out = tmp_path / "run"
    args = ["run", "evaluate", "env=SimpleDoorKey", "planner=when2ask-llm", "episodes=3"]
    args += ["max_steps=8", "tracking=wandb,tensorboard", "--quiet", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "llmrl.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    history, summary, config, files = wandb_run(out)
    rows = [row for row in history if "charts/episodic_return" in row]
    assert [row["global_step"] for row in rows] == [1, 2, 3]
    assert [row["charts/episodic_return"] for row in rows] == pytest.approx(episode_returns(out))
    assert config["planner"] == "when2ask-llm" and config["episodes"] == "3"
    assert config["provenance"]["mode"] == "embedded"
    table = json.loads((out / "results.json").read_text())["rows"][0]
    assert summary["results/llm_calls_per_episode"] == pytest.approx(table["llm_calls_per_episode"])
    calls = int(summary["llm/requests"])
    assert calls >= 3 and calls == round(table["llm_calls_per_episode"] * 3)
    assert summary["llm/tokens"] > 0  # the tiny model computed them (no cache configured)
    assert f"LLM: {calls} calls through the gateway" in result.stdout  # the same ledger
    assert {"plots/evaluate.png", "results/results.json"} <= files
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tb").iterdir())


# -- the setting ------------------------------------------------------------------------------
def test_the_setting_takes_a_list_a_comma_list_or_none_and_names_what_is_allowed():
    assert validate_config("evaluate", {}).tracking == ["tensorboard"]
    assert validate_config("evaluate", {"tracking": "mlflow,wandb"}).tracking == ["mlflow", "wandb"]
    assert validate_config("evaluate", {"tracking": ["none"]}).tracking == []
    with pytest.raises(ConfigError) as bad:
        validate_config("evaluate", {"tracking": ["mlfow"]})
    assert "config.tracking.0" in str(bad.value)
    assert "'tensorboard', 'mlflow', 'wandb' or 'none'" in str(bad.value)
    with pytest.raises(ConfigError, match=r"config.wandb_mode: .*'offline', 'online' or"):
        validate_config("evaluate", {"wandb_mode": "sometimes"})
    with pytest.raises(ConfigError, match="cannot be combined"):
        validate_config("evaluate", {"tracking": "none,mlflow"})


def test_a_tracker_not_installed_is_refused_at_validation_saying_what_to_install():
    """A Python without mlflow (an import hook refuses it, as a missing package would be)."""
    code = """
import importlib.abc, sys
class NoMlflow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mlflow" or name.startswith("mlflow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoMlflow())
from llmrl.recipes.config import ConfigError, validate_config
validate_config("evaluate", {"tracking": "tensorboard"})
try:
    validate_config("evaluate", {"tracking": "mlflow"})
except ConfigError as exc:
    print(exc)
"""
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "config.tracking: Value error, mlflow selected but not installed" in shown
    assert "pip install 'llmrl[tracking]'" in shown


def test_params_leave_secrets_out():
    config = {
        "planner_kwargs": {"model": "tiny", "api_key": "sk-1", "nested": {"auth_token": "t"}},
        "mlflow_tracking_uri": "https://me:pw@mlflow.example:443/?token=abc&x=1",
        "envs": ["a", "b"],
        "seed": 3,
        "none": None,
    }
    assert flat_params(config) == {
        "planner_kwargs.model": "tiny",
        "planner_kwargs.api_key": "[redacted]",
        "planner_kwargs.nested.auth_token": "[redacted]",
        "mlflow_tracking_uri": "https://mlflow.example:443/?token=[redacted]&x=1",
        "envs": "[a, b]",
        "seed": "3",
        "none": "None",
    }


def test_llmrl_recipes_describes_the_tracking_settings():
    shown = CliRunner().invoke(main, ["recipes", "evaluate"], terminal_width=400)
    assert shown.exit_code == 0, shown.output
    for key in ("tracking", "mlflow_tracking_uri", "mlflow_experiment", "wandb_project"):
        assert key in shown.output
    assert "report_to" in shown.output and "llmrl[tracking]" in shown.output


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("http://169.254.169.254/latest", "not an allowed MLflow server"),  # a tenant's pick
        ("https://me:pw@mlflow.example/", "not an allowed MLflow server"),
        ("sqlite:////etc/llmrl-tracking.db", "mlflow_tracking_uri"),  # outside the roots
        ("file:///tmp/../etc/mlruns", "mlflow_tracking_uri"),
        ("/etc/mlruns", "mlflow_tracking_uri"),
        ("ftp://host/x", "scheme 'ftp'"),
    ],
)
def test_a_config_names_only_allowed_servers_and_stores_under_the_roots(uri, says, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(TRACKING_SERVERS_VAR, raising=False)
    with pytest.raises(ConfigError) as refused:
        validate_config("evaluate", {"tracking": "mlflow", "mlflow_tracking_uri": uri})
    assert refused.value.errors[0]["loc"] == ["config", "mlflow_tracking_uri"]
    assert says in str(refused.value) and "pw" not in str(refused.value)


def test_the_operator_allows_a_server_by_its_origin(monkeypatch, tmp_path):
    monkeypatch.setenv(TRACKING_SERVERS_VAR, "http://mlflow:5000, https://other.example")
    config = validate_config("evaluate", {"mlflow_tracking_uri": "http://MLflow:5000/"})
    assert config.mlflow_tracking_uri == "http://MLflow:5000/"
    with pytest.raises(ConfigError):  # the same host on another port is another server
        validate_config("evaluate", {"mlflow_tracking_uri": "http://mlflow:5001"})
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # tests' roots hold tmp_path
    assert validate_config("evaluate", {"mlflow_tracking_uri": store}).mlflow_tracking_uri == store


def test_where_a_run_reports_is_no_part_of_its_identity():
    """A file that adds tracking keeps its run ids, its out dirs' resumes and kept reports."""
    from llmrl.orchestrator.experiments import parse_spec, plan_experiment

    base = {"recipe": "evaluate", "config": {"episodes": 2}, "seeds": [0]}
    tracked = {**base, "config": {"episodes": 2, "tracking": "none", "wandb_project": "p"}}
    before = plan_experiment(parse_spec(base), "trial")
    after = plan_experiment(parse_spec(tracked), "trial")
    assert [run.run_id for run in before] == [run.run_id for run in after]
    assert identity(after[0].config) == identity(before[0].config)
