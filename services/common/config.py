"""Configuration shared by every service: default ports, addresses, directories, overrides.

Default ports live here and only here (the README's table is generated from the same
values). Each can be overridden by a CLI flag or an environment variable:

    LLMRL_<SERVICE>_HOST, LLMRL_<SERVICE>_PORT, LLMRL_<SERVICE>_GRPC_PORT

e.g. LLMRL_SIMULATOR_GRPC_PORT=6000. Services bind 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICES = ("simulator", "llm_gateway", "learner", "annotator", "orchestrator", "worker")


@dataclass(frozen=True)
class ServicePorts:
    http: int  # REST API (where there is one), /health and /metrics
    grpc: int | None = None


DEFAULT_PORTS: dict[str, ServicePorts] = {
    "orchestrator": ServicePorts(http=8000),
    "llm_gateway": ServicePorts(http=8001, grpc=50052),
    "learner": ServicePorts(http=8002),
    "annotator": ServicePorts(http=8003),
    "simulator": ServicePorts(http=8004, grpc=50051),
    "worker": ServicePorts(http=8005),
}
DEFAULT_HOST = "127.0.0.1"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_PORT = "an integer port"


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def env_int(name: str, default: int, minimum: int | None = None, what: str = "an integer") -> int:
    """The integer in environment variable `name` (`default` when unset or empty). Anything
    else, or a value below `minimum`, is a ValueError naming the variable and what it takes."""
    value = _env(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or (minimum is not None and number < minimum):
        raise ValueError(f"environment variable {name} must be {what}, got {value!r}")
    return number


def env_seconds(name: str, default: float, maximum: float = 86_400) -> float:
    """Seconds in environment variable `name` (`default` when unset or empty), between 0 and
    `maximum`; anything else is a ValueError naming the variable and the range."""
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= maximum:
        raise ValueError(f"{name}: expected seconds in [0, {maximum:g}], got {raw[:50]!r}")
    return value


def _check_service(service: str) -> None:
    if service not in DEFAULT_PORTS:
        raise ValueError(f"unknown service {service!r}; services: {', '.join(DEFAULT_PORTS)}")


def service_host(service: str) -> str:
    _check_service(service)
    return _env(f"LLMRL_{service.upper()}_HOST") or DEFAULT_HOST


def service_port(service: str) -> int:
    """The service's HTTP port (REST API, /health, /metrics)."""
    _check_service(service)
    return env_int(f"LLMRL_{service.upper()}_PORT", DEFAULT_PORTS[service].http, what=_PORT)


def service_grpc_port(service: str) -> int:
    _check_service(service)
    default = DEFAULT_PORTS[service].grpc
    if default is None:
        raise ValueError(f"service {service!r} has no gRPC port")
    return env_int(f"LLMRL_{service.upper()}_GRPC_PORT", default, what=_PORT)


def grpc_address(service: str) -> str:
    """host:port a client dials for the service's gRPC API (env var LLMRL_<S>_ADDRESS wins)."""
    return _env(f"LLMRL_{service.upper()}_ADDRESS") or (
        f"{service_host(service)}:{service_grpc_port(service)}"
    )


def http_url(service: str) -> str:
    """Base URL of the service's HTTP API (env var LLMRL_<S>_URL wins)."""
    from llmrl.common.tls import http_scheme  # https when the deployment serves TLS

    return _env(f"LLMRL_{service.upper()}_URL") or (
        f"{http_scheme()}://{service_host(service)}:{service_port(service)}"
    )


def redis_url() -> str:
    return _env("LLMRL_REDIS_URL") or DEFAULT_REDIS_URL


def home_dir() -> Path:
    """Where runs, artifacts, the SQLite stores and caches live (LLMRL_HOME, default ./.llmrl)."""
    return Path(_env("LLMRL_HOME") or ".llmrl").resolve()


def cache_dir() -> Path:
    """Where converted model weights and other derived files are cached."""
    default = Path(_env("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmrl"
    return Path(_env("LLMRL_CACHE_DIR") or default)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a clear error names the file when it is not one."""
    text = Path(path).read_text()
    data = yaml.safe_load(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: expected a YAML mapping at the top level, got {type(data).__name__}"
        )
    return data


def nested(key: str, value: Any) -> dict[str, Any]:
    """{"ppo": {"learning_rate": value}} for the dotted key "ppo.learning_rate"."""
    *groups, leaf = key.split(".")
    result: dict[str, Any] = {leaf: value}
    for group in reversed(groups):
        result = {group: result}
    return result


def deep_merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on `base` (neither changed): mappings merged key by key at every depth, any other
    value of `over` replacing `base`'s. How `key=value` overrides go over a YAML file."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _as_number(text: str) -> Any:
    """YAML 1.1 reads `3e-4` as a string; users mean a number."""
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


def parse_overrides(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Turn `key=value` strings into a (nested, for dotted keys) dict with YAML-typed values.

    `episodes=20` gives an int, `planner=oracle` a string, `lam=0.01` a float,
    `envs=[SimpleDoorKey,KeyInBox]` a list and `ppo.lr=3e-4` {"ppo": {"lr": 3e-4}}.
    """
    result: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"expected key=value, got {pair!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):
            value = _as_number(value)
        target = result
        *parents, leaf = key.split(".")
        for parent in parents:
            node = target.setdefault(parent, {})
            if not isinstance(node, dict):
                raise ValueError(f"{key!r}: {parent!r} is set to a value and cannot have sub-keys")
            target = node
        target[leaf] = value
    return result


def check_settings(service: str, settings: dict[str, Any], allowed: Iterable[str]) -> None:
    """A service's `--set key=value` settings: ValueError naming unknown keys and the allowed."""
    allowed = sorted(allowed)
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise ValueError(f"unknown {service} settings {unknown}; allowed: {', '.join(allowed)}")
