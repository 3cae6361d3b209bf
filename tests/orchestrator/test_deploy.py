"""docker-compose.yml validates against the compose specification, runs every service with the
command `llmrl up` runs, and Prometheus and Grafana are wired to the services' metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import llmrl.orchestrator.metrics  # noqa: F401  (registers the orchestrator's metrics)
from llmrl.common.config import DEFAULT_PORTS
from llmrl.orchestrator.launcher import SERVICES, redis_command, service_commands

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
COMPOSE_GPU = REPO / "docker-compose.gpu.yml"


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def compose_name(service: str) -> str:
    return service.replace("_", "-")  # llm_gateway: a DNS-friendly host name in the network


def test_compose_files_validate_against_the_compose_spec():
    checker = shutil.which("check-jsonschema") or str(
        Path(sys.executable).with_name("check-jsonschema")
    )
    result = subprocess.run(
        [checker, "--builtin-schema", "vendor.compose-spec", str(COMPOSE), str(COMPOSE_GPU)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_gpu_overlay_gives_a_gpu_to_the_services_that_hold_language_models():
    overlay = yaml.safe_load(COMPOSE_GPU.read_text())
    assert set(overlay["services"]) == {"llm-gateway", "learner"}
    assert set(overlay["services"]) <= set(compose()["services"])  # it overlays, adds none
    for service in overlay["services"].values():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in dockerfile  # CPU default
    assert '--index-url "${TORCH_INDEX}"' in dockerfile


def test_every_service_runs_what_llmrl_up_runs():
    services = compose()["services"]
    launcher_commands = service_commands(workers=1)
    for service in SERVICES:
        assert services[compose_name(service)]["command"] == ["llmrl", *launcher_commands[service]]
    assert services["worker"]["command"] == ["llmrl", *launcher_commands["worker-1"]]
    assert services["worker"]["deploy"]["replicas"] >= 2  # scalable rollout workers
    redis_flags = " ".join(services["redis"]["command"])
    persistence = " ".join(redis_command(6379, Path("/data"))[4:])  # after --port and --bind
    assert persistence.replace("/data", "") in redis_flags.replace("/data", "")
    assert any(volume.endswith(":/data") for volume in services["redis"]["volumes"])
    for name, service in services.items():  # published on loopback only
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)
    environment = services["orchestrator"]["environment"]
    assert environment["LLMRL_REDIS_URL"].startswith("redis://:${LLMRL_REDIS_PASSWORD:?")
    assert environment["LLMRL_REDIS_URL"].endswith("}@redis:6379/0")  # closed: a password
    assert services["redis"]["command"][-2] == "--requirepass"
    assert environment["LLMRL_SIMULATOR_ADDRESS"] == f"simulator:{DEFAULT_PORTS['simulator'].grpc}"


def test_prometheus_scrapes_every_service_at_its_metrics_port():
    config = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    targets = {}
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            targets[job["job_name"]] = static["targets"][0]
        for dns in job.get("dns_sd_configs", []):
            targets[job["job_name"]] = f"{dns['names'][0]}:{dns['port']}"
    for service, ports in DEFAULT_PORTS.items():
        assert targets[service] == f"{compose_name(service)}:{ports.http}", service
        assert compose_name(service) in compose()["services"]


def test_grafana_dashboard_is_provisioned_and_queries_existing_metrics():
    dashboards = REPO / "deploy" / "grafana"
    provider = yaml.safe_load(
        (dashboards / "provisioning" / "dashboards" / "llmrl.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboard = json.loads((dashboards / "dashboards" / "llmrl.json").read_text())
    titles = " ".join(panel["title"] for panel in dashboard["panels"]).lower()
    for topic in ("runs", "episodes stored per second", "llm calls", "cache hit rate", "spend"):
        assert topic in titles
    ours = {family.name for family in REGISTRY.collect()}  # counters: without "_total"
    sources = "\n".join(p.read_text() for p in (REPO / "services").rglob("*.py"))
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for metric in re.findall(r"llmrl_[a-z_]+", target["expr"]):
                base = re.sub(r"_(total|bucket|sum|count)$", "", metric)
                assert base in ours or f'"{base}"' in sources, metric


def test_compose_is_closed_by_default_and_prometheus_sends_the_token():
    services = compose()["services"]
    for name in ("simulator", "llm-gateway", "learner", "annotator", "orchestrator", "worker"):
        # `${VAR:?message}`: compose refuses to start without the shared token
        assert services[name]["environment"]["LLMRL_TOKEN"].startswith("${LLMRL_TOKEN:?"), name
    assert compose()["secrets"]["llmrl_token"] == {"environment": "LLMRL_TOKEN"}
    assert services["prometheus"]["secrets"] == ["llmrl_token"]
    config = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        assert job["authorization"] == {"credentials_file": "/run/secrets/llmrl_token"}, job
