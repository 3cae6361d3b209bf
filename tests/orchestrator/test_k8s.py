"""deploy/k8s validates (Kubernetes schemas, KEDA's CRD schemas, checkov) and runs the topology
of docker-compose.yml and `llmrl up`: the same commands, ports, settings and persistence."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from llmrl.common.config import DEFAULT_PORTS
from llmrl.common.queues import RedisBroker
from llmrl.orchestrator.launcher import SERVICES, redis_command, service_commands

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
BASE = K8S / "base"
SINGLE_NODE = K8S / "single-node"
KEDA_SCHEMAS = Path(__file__).with_name("k8s_schemas")
# The oldest Kubernetes the manifests claim (startupProbe, seccompProfile, Pod Security
# labels are all older) and the newest schema kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
SECRET = "llmrl-secrets"


def kustomization(folder: Path) -> dict[str, Any]:
    return yaml.safe_load((folder / "kustomization.yaml").read_text())


def manifests() -> list[dict[str, Any]]:
    """Every object of the base, in kustomization order."""
    objects = []
    for name in kustomization(BASE)["resources"]:
        objects += [doc for doc in yaml.safe_load_all((BASE / name).read_text()) if doc]
    return objects


def objects_of(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in manifests() if o["kind"] == kind}


def workloads() -> dict[str, dict[str, Any]]:
    return {name: o for kind in WORKLOAD_KINDS for name, o in objects_of(kind).items()}


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def k8s_name(service: str) -> str:
    return service.replace("_", "-")  # llm_gateway: a DNS-friendly name, as in compose


def env_of(workload: dict[str, Any]) -> dict[str, Any]:
    """The container's environment: the ConfigMaps it loads, then its own entries."""
    config_maps = objects_of("ConfigMap")
    env: dict[str, Any] = {}
    for source in container(workload).get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]]["data"])
    for entry in container(workload).get("env", []):
        env[entry["name"]] = entry.get("value", entry.get("valueFrom"))
    return env


# -- schemas -------------------------------------------------------------------------------------
def test_kustomization_lists_every_manifest_and_only_existing_ones():
    listed = set(kustomization(BASE)["resources"])
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(version: str):
    checked = 0
    for manifest in manifests():
        if manifest["apiVersion"].startswith("keda.sh/"):
            continue  # a custom resource: checked against KEDA's CRD schema below
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{manifest['kind']} {manifest['metadata']['name']}: {exc.message}")
        checked += 1
    assert checked >= 15


def strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it with strict field validation (kubectl's
    default): an object with declared properties refuses any other."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def keda_validator(kind: str) -> jsonschema.Draft7Validator:
    plural = {"ScaledObject": "scaledobjects", "TriggerAuthentication": "triggerauthentications"}
    path = KEDA_SCHEMAS / f"keda.sh_{plural[kind]}.v1alpha1.json"
    return jsonschema.Draft7Validator(strict(json.loads(path.read_text())))


def test_keda_objects_validate_against_kedas_crd_schemas():
    keda = [m for m in manifests() if m["apiVersion"].startswith("keda.sh/")]
    assert {m["kind"] for m in keda} == {"ScaledObject", "TriggerAuthentication"}
    for manifest in keda:
        assert manifest["apiVersion"] == "keda.sh/v1alpha1"
        errors = [
            f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
            for error in keda_validator(manifest["kind"]).iter_errors(manifest)
        ]
        assert not errors, (manifest["kind"], errors)


def test_the_keda_schema_check_catches_mistakes():
    (scaled,) = objects_of("ScaledObject").values()
    validator = keda_validator("ScaledObject")
    wrong_type = copy.deepcopy(scaled)
    wrong_type["spec"]["triggers"][0]["metadata"]["lagCount"] = 4  # KEDA wants strings
    misspelt = copy.deepcopy(scaled)
    misspelt["spec"]["maxReplicas"] = 4  # the field is maxReplicaCount
    missing = copy.deepcopy(scaled)
    del missing["spec"]["scaleTargetRef"]
    for broken in (wrong_type, misspelt, missing):
        assert not validator.is_valid(broken)


# -- the topology of docker-compose.yml and `llmrl up` -------------------------------------------
def test_every_service_runs_what_llmrl_up_runs_on_its_ports():
    deployments, services = objects_of("Deployment"), objects_of("Service")
    commands = service_commands(workers=1)
    for service in SERVICES:
        name = k8s_name(service)
        main = container(deployments[name])
        assert main["command"] == ["llmrl", *commands[service]], service
        ports = DEFAULT_PORTS[service]
        expected = {"http": ports.http} | ({"grpc": ports.grpc} if ports.grpc else {})
        assert {p["name"]: p["containerPort"] for p in main["ports"]} == expected, service
        published = {p["name"]: p["port"] for p in services[name]["spec"]["ports"]}
        assert published == expected, service
        selector = services[name]["spec"]["selector"]
        assert (
            selector.items() <= deployments[name]["spec"]["template"]["metadata"]["labels"].items()
        )
    worker = container(deployments["worker"])
    assert worker["command"] == ["llmrl", *commands["worker-1"]]
    assert worker["ports"] == [{"name": "http", "containerPort": DEFAULT_PORTS["worker"].http}]


def test_every_llmrl_container_is_ready_and_live_on_health():
    for name, workload in objects_of("Deployment").items():
        main = container(workload)
        for probe in ("readinessProbe", "livenessProbe"):
            assert main[probe]["httpGet"] == {"path": "/health", "port": "http"}, (name, probe)
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        http = next(p["containerPort"] for p in main["ports"] if p["name"] == "http")
        assert annotations["prometheus.io/port"] == str(http), name


def test_settings_match_docker_compose():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    compose_env = compose["x-llmrl"]["environment"]
    for name, workload in objects_of("Deployment").items():
        env = env_of(workload)
        for key in (
            "LLMRL_HOME",
            "LLMRL_SIMULATOR_ADDRESS",
            "LLMRL_LLM_GATEWAY_ADDRESS",
            "LLMRL_LEARNER_URL",
            "LLMRL_ANNOTATOR_URL",
        ):
            assert env[key] == compose_env[key], (name, key)
        mounts = {m["mountPath"] for m in container(workload)["volumeMounts"]}
        assert env["LLMRL_HOME"] in mounts, name  # the shared artifact volume
    for name in ("orchestrator", "worker", "llm-gateway"):  # queues; LLM cache and ledger
        env = env_of(objects_of("Deployment")[name])
        assert env["LLMRL_REDIS_URL"] == "redis://:$(REDIS_PASSWORD)@redis:6379/0", name
        assert env["REDIS_PASSWORD"] == {"secretKeyRef": {"name": SECRET, "key": "redis-password"}}
        names = [entry["name"] for entry in container(objects_of("Deployment")[name])["env"]]
        assert names.index("REDIS_PASSWORD") < names.index("LLMRL_REDIS_URL"), name  # $(...)


def test_the_orchestrator_token_comes_from_the_secret():
    env = env_of(objects_of("Deployment")["orchestrator"])
    assert env["LLMRL_ORCHESTRATOR_TOKEN"] == {
        "secretKeyRef": {"name": SECRET, "key": "orchestrator-token"}
    }
    assert not objects_of("Secret"), "secrets are created by hand, never kept in git"


def test_every_llmrl_service_gets_the_shared_token_from_the_secret():
    for name in ("simulator", "llm-gateway", "learner", "annotator", "worker"):
        assert env_of(objects_of("Deployment")[name])["LLMRL_TOKEN"] == {
            "secretKeyRef": {"name": SECRET, "key": "orchestrator-token"}
        }, name


def test_redis_persists_with_the_append_only_file_of_llmrl_up():
    redis = objects_of("StatefulSet")["redis"]
    main = container(redis)
    persistence = redis_command(6379, Path("/data"))[4:]  # after --port and --bind
    args = main["args"]
    assert args[: len(persistence)] == persistence
    assert args[len(persistence) :] == ["--requirepass", "$(REDIS_PASSWORD)"]
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in main["volumeMounts"]
    assert objects_of("Service")["redis"]["spec"]["ports"][0]["port"] == 6379


def test_learner_and_gateway_hold_a_gpu_on_a_gpu_node():
    deployments = objects_of("Deployment")
    for name, workload in deployments.items():
        spec = workload["spec"]["template"]["spec"]
        limits = container(workload)["resources"]["limits"]
        if name in ("learner", "llm-gateway"):
            assert limits["nvidia.com/gpu"] == 1, name
            assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}, name
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
                "tolerations"
            ]
        else:
            assert "nvidia.com/gpu" not in limits and "nodeSelector" not in spec, name


# -- workers scaled by KEDA on the episode-job stream ----------------------------------------------
def test_workers_scale_on_the_backlog_of_the_episode_job_stream():
    jobs = RedisBroker("redis://redis.invalid:6379/0").jobs  # names only: never connects
    (scaled,) = objects_of("ScaledObject").values()
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "worker",
    }
    assert spec["minReplicaCount"] < objects_of("Deployment")["worker"]["spec"]["replicas"]
    assert spec["maxReplicaCount"] > 2
    measures = set()
    authentications = objects_of("TriggerAuthentication")
    namespace = scaled["metadata"]["namespace"]
    for trigger in spec["triggers"]:
        metadata = trigger["metadata"]
        assert trigger["type"] == "redis-streams"
        assert metadata["stream"] == jobs.stream and metadata["consumerGroup"] == jobs.group
        # KEDA's operator runs in its own namespace: the Redis service's full name.
        assert metadata["address"] == f"redis.{namespace}.svc.cluster.local:6379"
        measures |= {"lagCount", "pendingEntriesCount"} & metadata.keys()
        (secret_ref,) = authentications[trigger["authenticationRef"]["name"]]["spec"][
            "secretTargetRef"
        ]
        assert secret_ref == {"parameter": "password", "name": SECRET, "key": "redis-password"}
    # waiting jobs wake and grow the pool; handed-out jobs keep their workers
    assert measures == {"lagCount", "pendingEntriesCount"}


# -- security posture ------------------------------------------------------------------------------
def test_every_pod_is_non_root_read_only_and_bounded():
    for name, workload in workloads().items():
        pod = workload["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        main = container(workload)
        security = main["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["capabilities"] == {"drop": ["ALL"]}, name
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= main["resources"][bound].keys(), (name, bound)


def checkov() -> str:
    """checkov's own venv (`make install-test`: .venv/checkov; its pins clash with the
    project's, see pyproject.toml), else one on PATH or beside this Python."""
    for candidate in (
        os.environ.get("LLMRL_CHECKOV"),
        str(Path(sys.prefix) / "checkov" / "bin" / "checkov"),
        str(Path(sys.executable).with_name("checkov")),
        shutil.which("checkov"),
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail(
        "checkov not found: `make install-test` installs it in .venv/checkov "
        "(python -m venv .venv/checkov && .venv/checkov/bin/pip install checkov==3.3.30), "
        "or point LLMRL_CHECKOV at one"
    )


def test_checkov_passes_every_kubernetes_check_but_the_justified_skips():
    config = K8S / ".checkov.yaml"
    skipped = yaml.safe_load(config.read_text())["skip-check"]
    for check in skipped:  # each skip is explained just above it in the config
        assert re.search(rf"#.*\n\s*- {check}\b", config.read_text()), check
    result = subprocess.run(
        [checkov(), "--config-file", str(config), "-d", str(BASE), "--skip-download"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"},  # offline
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "Failed checks: 0" in result.stdout
    assert re.search(r"Passed checks: [1-9]\d{2,}", result.stdout), result.stdout[-2000:]


# -- the single-node overlay -----------------------------------------------------------------------
def pointer_exists(document: Any, pointer: str) -> bool:
    for raw in pointer.lstrip("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(document, list):
            if not token.isdigit() or int(token) >= len(document):
                return False
            document = document[int(token)]
        elif isinstance(document, dict) and token in document:
            document = document[token]
        else:
            return False
    return True


def test_single_node_patches_touch_fields_the_base_has():
    overlay = kustomization(SINGLE_NODE)
    assert overlay["resources"] == ["../base"]
    for patch in overlay["patches"]:
        target = patch["target"]
        targets = [
            o
            for o in manifests()
            if o["kind"] == target["kind"]
            and target.get("name", o["metadata"]["name"]) == o["metadata"]["name"]
        ]
        assert targets, target
        for operation in yaml.safe_load(patch["patch"]):
            for manifest in targets:
                assert pointer_exists(manifest, operation["path"]), (target, operation)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not on PATH")
def test_single_node_overlay_renders_valid_manifests_without_gpus():
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(SINGLE_NODE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert "nvidia.com/gpu" not in rendered
    assert len(objects) == len(manifests())
    for manifest in objects:
        if not manifest["apiVersion"].startswith("keda.sh/"):
            kubernetes_validate.validate(manifest, KUBERNETES_VERSIONS[-1], strict=True)
