"""The gateway beside its peers (issue 56, item 1): the project's LLM gateway, the LiteLLM proxy
and the upstream itself, in one run on one machine, through one client.

Processes, all on 127.0.0.1:
- the upstream: a stand-in OpenAI-compatible server (uvicorn, a bare ASGI app in its own
  process) that answers `/v1/chat/completions` at once with a fixed short completion and a
  `usage` block. Measured directly, it is the floor.
- the gateway: `llmrl serve llm_gateway`, one model routed to the upstream by the `openai`
  backend, auth on (a token), the response cache and the ledger as by default in service mode
  (Redis, on a private redis-server when one is on PATH; else SQLite), priced so that every
  miss costs something.
- the LiteLLM proxy (`litellm[proxy]`, pinned; installed on first use into its own virtual
  environment under ~/.cache/llmrl-bench, never a project dependency): one process, auth on
  (a master key), the same upstream and price, once with no cache and once with its local
  (in-memory) cache, whose hits the hit path times.

Clients: the official `openai` client (sync, one per thread) for every REST target; the
gateway's own gRPC client (`llmrl.llm_gateway.client.connect`) for its gRPC path. For each
target: sequential latency (p50/p90/p99 over --requests) and throughput at --concurrency
clients (over --concurrent-requests), on the cache-miss path (every prompt unique) and the
cache-hit path (one request repeated). Rounds interleave the targets (each round starts at
the next target) so that the load of a shared machine falls on all alike; what each phase cost
in CPU, per process, is read from /proc (a figure that load shifts far less than wall time).
Whether each target recorded usage and cost is checked too: the gateway's ledger
(`GET /v1/usage/<run>`) against what was sent; LiteLLM's spend log (it needs a database).

Goals (issue 56): on a miss the gateway adds <= 2 ms at p50 and <= 5 ms at p99 to the upstream
and keeps >= 80% of its 16-client throughput; a hit takes <= 0.5 ms over gRPC, <= 1 ms over REST.

Scoring through a serving engine (`score_through_gateway` in the report; `--skip-score` leaves
it out, `--score-only` runs it alone): a back gateway serves a local model (`--score-model`,
SmolLM2 by default) and a front gateway scores through it with the `openai` backend
(`score: true`: echo + logprobs on the back's /v1/completions, one request for all
candidates), with the model's tokenizer (token ids) and without (text); both without a cache.
The same `/v1/score` requests (a new prompt each, 6 candidates) go to the back (the local
path) and through the front, interleaved, sequentially: the added ms per score request, the
CPU per request of each process, and how far the front's scores are from the local ones.

    python bench/gateway_peers.py [--requests 300] [--concurrent-requests 800]
        [--concurrency 16] [--rounds 3] [--skip-litellm] [--compare-gateway DIR]
        [--skip-score | --score-only] [--score-requests 10] [--score-rounds 3]
        [--score-model builtin:smollm2-135m-instruct]

`--compare-gateway DIR` adds the gateway of another copy of the package (DIR/llmrl, e.g.
services/ copied before a change) as one more target: before/after figures from one run.

A readable table, then, as the last line, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

MODEL = "bench-model"
COMPLETION_TEXT = "ok"
PROMPT_TOKENS, COMPLETION_TOKENS = 12, 2  # the upstream's fixed usage block
PROMPT_USD_PER_1M, COMPLETION_USD_PER_1M = 0.15, 0.60  # gpt-4o-mini's price: a miss costs
MAX_TOKENS = 16
LITELLM_VERSION = "1.108.7"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmrl-bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the stand-in upstream (run in its own process: --serve-upstream PORT) ------------------------
def completion(model: str, number: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-bench-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": COMPLETION_TEXT},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        },
    }


def upstream_app() -> Callable:
    """A bare ASGI app: POST /v1/chat/completions answers a fixed completion with `usage`;
    GET /stats says how many completions it answered (a hit must not reach it)."""
    answered = [0]

    async def app(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        status, payload = 404, {"error": {"message": "not found", "type": "not_found"}}
        if scope["path"] == "/v1/chat/completions" and scope["method"] == "POST":
            answered[0] += 1  # one event loop: no lock needed
            model = json.loads(body or b"{}").get("model", MODEL)
            status, payload = 200, completion(model, answered[0])
        elif scope["path"] == "/stats":
            status, payload = 200, {"completions": answered[0]}
        elif scope["path"] in ("/health", "/v1/models"):
            status, payload = 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        data = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


def serve_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(upstream_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- processes ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, log: Path, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited ({process.returncode}): {tail(log)}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up in {timeout_s:g} s: {tail(log)}")


def tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def base_env() -> dict[str, str]:
    """This environment without what would configure a child differently from the bench's
    own settings (a user's gateway config, TLS)."""
    return {
        k: v
        for k, v in os.environ.items()
        if k != "LLMRL_LLM_GATEWAY_CONFIG" and not k.startswith("LLMRL_TLS")
    }


def start_upstream(workdir: Path) -> tuple[subprocess.Popen, str]:
    port, log = free_port(), workdir / "upstream.log"
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream", str(port)],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"),  # noqa: SIM115
        env=base_env(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{url}/health", process, log, 60, "the upstream")
    return process, url


def start_redis(workdir: Path) -> tuple[subprocess.Popen | None, str | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        return None, None
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    import redis

    client = redis.Redis(port=port)
    for _ in range(250):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    client.close()
    return process, f"redis://127.0.0.1:{port}/0"


@dataclass
class Gateway:
    process: subprocess.Popen
    url: str
    grpc_address: str
    token: str
    storage: str
    log: Path


def start_gateway(
    workdir: Path, upstream: str, redis_url: str | None, source: Path | None = None
) -> Gateway:
    """`llmrl serve llm_gateway` routing MODEL to `upstream`; `source`: a folder holding
    another `llmrl` package to serve instead of the installed one (a before/after comparison)."""
    token = secrets.token_urlsafe(24)
    name = "gateway" if source is None else "gateway-compare"
    workdir = workdir / name
    workdir.mkdir()
    settings: dict[str, Any] = {
        "default_model": MODEL,
        "models": {
            MODEL: {
                "backend": "openai",
                "base_url": f"{upstream}/v1",
                "remote_model": MODEL,
                "api_key_env": "BENCH_UPSTREAM_API_KEY",
                "prompt_usd_per_1m": PROMPT_USD_PER_1M,
                "completion_usd_per_1m": COMPLETION_USD_PER_1M,
            }
        },
    }
    env = {**base_env(), "LLMRL_HOME": str(workdir / "gateway-home"), "LLMRL_TOKEN": token,
           "BENCH_UPSTREAM_API_KEY": "sk-bench-upstream-key"}  # fmt: skip
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, [env.get("PYTHONPATH")])])
        settings["cache"] = {"prefix": "llmrl:compare:llm_cache:"}  # apart from the other's
        settings["ledger"] = {"key": "llmrl:compare:llm_ledger"}
    if redis_url:  # cache and ledger "auto": Redis in service mode, as by default
        env["LLMRL_REDIS_URL"] = redis_url
    else:
        settings.setdefault("cache", {})["backend"] = "sqlite"
        settings.setdefault("ledger", {})["backend"] = "sqlite"
    config = workdir / "gateway.yaml"
    config.write_text(yaml.safe_dump(settings))
    port, grpc_port, log = free_port(), free_port(), workdir / "gateway.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "serve", "llm_gateway", "--host", "127.0.0.1",
         "--port", str(port), "--grpc-port", str(grpc_port), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"),  # noqa: SIM115
        env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{url}/health", process, log, 120, name)
    storage = "redis" if redis_url else "sqlite"
    return Gateway(process, url, f"127.0.0.1:{grpc_port}", token, storage, log)


def litellm_python(venv: Path, version: str) -> Path:
    """The LiteLLM virtual environment's python, creating it (python -m venv, then pip) when
    it lacks `litellm[proxy]==version`."""
    python = venv / "bin" / "python"
    marker = venv / f".litellm-{version}"
    if marker.exists() and python.exists():
        return python
    print(f"installing litellm[proxy]=={version} into {venv} (first run only)...", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"litellm[proxy]=={version}"],
        check=True,
    )  # fmt: skip
    marker.touch()
    return python


@dataclass
class LiteLLM:
    process: subprocess.Popen
    url: str
    key: str
    cache: bool
    log: Path


def start_litellm(workdir: Path, python: Path, upstream: str, cache: bool) -> LiteLLM:
    key = "sk-" + secrets.token_hex(16)
    config: dict[str, Any] = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": f"{upstream}/v1",
                    "api_key": "os.environ/BENCH_UPSTREAM_API_KEY",
                },
                "model_info": {
                    "input_cost_per_token": PROMPT_USD_PER_1M / 1e6,
                    "output_cost_per_token": COMPLETION_USD_PER_1M / 1e6,
                },
            }
        ],
        "general_settings": {"master_key": key},
        "litellm_settings": {"telemetry": False},
    }
    if cache:
        config["litellm_settings"].update({"cache": True, "cache_params": {"type": "local"}})
    name = "litellm-cache" if cache else "litellm"
    path, log, port = workdir / f"{name}.yaml", workdir / f"{name}.log", free_port()
    path.write_text(yaml.safe_dump(config))
    env = {
        **base_env(),
        "BENCH_UPSTREAM_API_KEY": "sk-bench-upstream-key",
        # no traffic off this machine: the bundled price map, not GitHub's; no telemetry
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for variable in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL"):  # no database: as documented
        env.pop(variable, None)
    process = subprocess.Popen(
        [str(python.parent / "litellm"), "--config", str(path), "--host", "127.0.0.1",
         "--port", str(port), "--num_workers", "1"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, cwd=workdir,  # noqa: SIM115
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{url}/health/liveliness", process, log, 240, f"LiteLLM ({name})")
    return LiteLLM(process, url, key, cache, log)


# -- CPU time, from /proc -----------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent = int(stat[stat.rindex(")") + 2 :].split()[1])
                tree.setdefault(parent, []).append(int(entry))
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its descendants (live ones)."""
    tree, total, todo = _children(), 0.0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{current}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        todo.extend(tree.get(current, []))
    return total


class CpuMeter:
    """CPU seconds spent by named processes (and by this one) over a phase."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    def read(self) -> dict[str, float]:
        times = os.times()
        return {"client": times.user + times.system} | {
            name: cpu_seconds(pid) for name, pid in self.pids.items()
        }

    @contextlib.contextmanager
    def phase(self, into: dict[str, float]) -> Iterator[None]:
        before = self.read()
        yield
        after = self.read()
        for name in after:
            into[name] = into.get(name, 0.0) + after[name] - before[name]


# -- targets ----------------------------------------------------------------------------------
@dataclass
class Target:
    """One thing to measure: how to make a caller (one per thread) and what it sends."""

    name: str
    label: str
    make_caller: Callable[[], Callable[[str], Any]]
    has_cache: bool
    processes: list[str]  # which processes' CPU belongs to this target's path
    callers: list[Callable[[str], Any]] = field(default_factory=list)

    def caller(self, index: int) -> Callable[[str], Any]:
        while len(self.callers) <= index:
            self.callers.append(self.make_caller())
        return self.callers[index]


def openai_target(
    name: str, label: str, base_url: str, key: str, cache: bool, processes: list[str],
    headers: dict[str, str] | None = None,
) -> Target:  # fmt: skip
    import openai

    def make() -> Callable[[str], Any]:
        client = openai.OpenAI(
            base_url=base_url, api_key=key, max_retries=0, timeout=60, default_headers=headers
        )

        def call(prompt: str) -> Any:
            response = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": prompt}],
                max_tokens=MAX_TOKENS, temperature=0,
            )  # fmt: skip
            if response.choices[0].message.content != COMPLETION_TEXT:
                raise RuntimeError(f"{name}: unexpected answer {response.choices[0]!r}")
            return response

        return call

    return Target(name, label, make, cache, processes)


def grpc_target(address: str, run_id: str) -> Target:
    from llmrl.llm_gateway.client import connect

    def make() -> Callable[[str], Any]:
        client = connect(address, timeout_s=60)

        def call(prompt: str) -> Any:
            result = client.chat(
                [{"role": "user", "content": prompt}], model=MODEL, max_tokens=MAX_TOKENS,
                run_id=run_id,
            )  # fmt: skip
            if result.texts != [COMPLETION_TEXT]:
                raise RuntimeError(f"gateway gRPC: unexpected answer {result.texts!r}")
            return result

        return call

    return Target("gateway_grpc", "gateway gRPC", make, True, ["gateway", "redis", "upstream"])


# -- measurements ---------------------------------------------------------------------------------
def summary(seconds: list[float]) -> dict[str, Any]:
    if not seconds:
        return {"n": 0}
    ms = np.asarray(seconds) * 1000
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p90_ms": round(float(np.percentile(ms, 90)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "mean_ms": round(float(ms.mean()), 3),
    }


@dataclass
class PathFigures:
    """What the rounds of one target on one path (miss or hit) collect."""

    sequential: list[float] = field(default_factory=list)
    sequential_p50_per_round: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    throughput_per_round: list[float] = field(default_factory=list)
    errors: int = 0
    requests: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    upstream_calls: int = 0

    def result(self, processes: list[str]) -> dict[str, Any]:
        cpu_ms = {
            name: round(seconds * 1000 / self.requests, 3)
            for name, seconds in self.cpu.items()
            if name in [*processes, "client"] and self.requests
        }
        return {
            "sequential": summary(self.sequential),
            "sequential_p50_ms_per_round": [round(v, 3) for v in self.sequential_p50_per_round],
            "concurrent": {
                "requests_per_s": round(float(np.median(self.throughput_per_round)), 1)
                if self.throughput_per_round
                else None,
                "requests_per_s_per_round": [round(v, 1) for v in self.throughput_per_round],
                **{k: v for k, v in summary(self.concurrent).items() if k != "n"},
            },
            "cpu_ms_per_request": cpu_ms,
            "requests": self.requests,
            "errors": self.errors,
            "upstream_calls": self.upstream_calls,
        }


class Bench:
    def __init__(self, args: argparse.Namespace, meter: CpuMeter, upstream: str) -> None:
        self.args, self.meter, self.upstream = args, meter, upstream
        self.http = httpx.Client(base_url=upstream, timeout=10)
        self.unique = itertools.count()
        self.sent: dict[str, int] = {}  # requests sent per target
        self.hits: dict[str, int] = {}  # of which repeats of a cached request

    def upstream_calls(self) -> int:
        return int(self.http.get("/stats").json()["completions"])

    def prompt(self, target: Target) -> str:
        """A prompt no target has seen: every miss is a miss."""
        return f"[{target.name} #{next(self.unique)}] Say ok."

    @staticmethod
    def hit_prompt(target: Target) -> str:
        return f"[{target.name} hit] Say ok."

    def _sent(self, target: Target, count: int) -> None:
        self.sent[target.name] = self.sent.get(target.name, 0) + count

    def warm_up(self, target: Target) -> None:
        call = target.caller(0)
        for _ in range(self.args.warmup):
            call(self.prompt(target))
        if target.has_cache:
            call(self.hit_prompt(target))  # the miss that fills the cache
        self._sent(target, self.args.warmup + int(target.has_cache))
        self.concurrent(target, lambda: self.prompt(target), 4 * self.args.concurrency, None)

    def sequential(self, target: Target, prompt: Callable[[], str], figures: PathFigures) -> None:
        call, times = target.caller(0), []
        for _ in range(self.args.requests):
            text = prompt()
            started = time.perf_counter()
            try:
                call(text)
            except Exception:
                figures.errors += 1
                continue
            times.append(time.perf_counter() - started)
        self._sent(target, self.args.requests)
        figures.requests += self.args.requests
        figures.sequential.extend(times)
        if times:
            figures.sequential_p50_per_round.append(float(np.percentile(times, 50)) * 1000)

    def concurrent(
        self, target: Target, prompt: Callable[[], str], total: int, figures: PathFigures | None
    ) -> None:
        """`total` requests from `--concurrency` threads (one caller each) as fast as they go."""
        threads = self.args.concurrency
        callers = [target.caller(i) for i in range(threads)]
        prompts = [prompt() for _ in range(total)]
        order, lock = iter(prompts), threading.Lock()
        barrier = threading.Barrier(threads + 1)
        times: list[float] = []
        errors = [0]

        def work(call: Callable[[str], Any]) -> None:
            barrier.wait()
            while True:
                with lock:
                    text = next(order, None)
                if text is None:
                    return
                started = time.perf_counter()
                try:
                    call(text)
                except Exception:
                    errors[0] += 1
                    continue
                times.append(time.perf_counter() - started)

        workers = [threading.Thread(target=work, args=(c,), daemon=True) for c in callers]
        for worker in workers:
            worker.start()
        barrier.wait()
        started = time.perf_counter()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
        self._sent(target, total)
        if figures is not None:
            figures.requests += total
            figures.errors += errors[0]
            figures.concurrent.extend(times)
            figures.throughput_per_round.append(len(times) / elapsed)

    def measure(self, target: Target, path: str, figures: PathFigures) -> None:
        """One round of one target on one path: sequential, then concurrent."""
        if path == "miss":
            prompt = lambda: self.prompt(target)  # noqa: E731
        else:
            prompt = lambda: self.hit_prompt(target)  # noqa: E731
        before, done = self.upstream_calls(), figures.requests
        with self.meter.phase(figures.cpu):
            self.sequential(target, prompt, figures)
            self.concurrent(target, prompt, self.args.concurrent_requests, figures)
        figures.upstream_calls += self.upstream_calls() - before
        if path == "hit":
            self.hits[target.name] = self.hits.get(target.name, 0) + figures.requests - done

    def misses(self, name: str) -> int:
        return self.sent.get(name, 0) - self.hits.get(name, 0)


# -- usage and cost -----------------------------------------------------------------------------
def gateway_usage(gateway: Gateway, run_id: str, sent: int, misses: int) -> dict[str, Any]:
    """The gateway's ledger for `run_id` against what the bench sent (`misses`: the requests
    that could not be cache hits: every unique prompt, and the first of the repeated one)."""
    response = httpx.get(
        f"{gateway.url}/v1/usage/{run_id}",
        headers={"Authorization": f"Bearer {gateway.token}"},
        timeout=10,
    )
    response.raise_for_status()
    usage = response.json()
    per_call = (PROMPT_TOKENS * PROMPT_USD_PER_1M + COMPLETION_TOKENS * COMPLETION_USD_PER_1M) / 1e6
    expected_cost = misses * per_call
    recorded = (
        usage["requests"] == sent
        and usage["model_calls"] == misses
        and abs(usage["cost_usd"] - expected_cost) <= 1e-9 * max(1, misses)
    )
    return {
        "recorded": bool(recorded),
        "where": f"ledger ({gateway.storage}), GET /v1/usage/{run_id}",
        "sent": sent,
        "requests": usage["requests"],
        "cache_hits": usage["cache_hits"],
        "model_calls": usage["model_calls"],
        "errors": usage["errors"],
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "cost_usd": round(usage["cost_usd"], 9),
        "expected_model_calls": misses,
        "expected_cost_usd": round(expected_cost, 9),
    }


def litellm_usage(proxy: LiteLLM) -> dict[str, Any]:
    """What LiteLLM says about cost: the cost header of an answer, and its spend log (which
    needs a database: none is configured here, as in a plain `litellm --config` start)."""
    headers = {"Authorization": f"Bearer {proxy.key}"}
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "[litellm usage probe] Say ok."}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    url = f"{proxy.url}/v1/chat/completions"
    first = httpx.post(url, json=body, headers=headers, timeout=30)
    again = httpx.post(url, json=body, headers=headers, timeout=30)  # a hit, with a cache
    result: dict[str, Any] = {
        "usage_in_answer": "usage" in first.json(),
        "cost_header": first.headers.get("x-litellm-response-cost"),
        "cost_header_repeated": again.headers.get("x-litellm-response-cost"),
        "cache_key_header_repeated": again.headers.get("x-litellm-cache-key") is not None,
    }
    spend = {}
    for path in ("/spend/logs", "/global/spend"):
        try:
            reply = httpx.get(f"{proxy.url}{path}", headers=headers, timeout=30)
            spend[path] = {"status": reply.status_code, "body": reply.text[:300]}
        except httpx.HTTPError as exc:
            spend[path] = {"error": type(exc).__name__}
    result["spend_endpoints"] = spend
    result["recorded"] = any(
        s.get("status") == 200 and s.get("body", "").strip() not in ("", "[]", "{}", "null")
        for s in spend.values()
    )
    result["where"] = "spend log: needs DATABASE_URL (Postgres); none configured"
    return result


# -- report -------------------------------------------------------------------------------------
def loads() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo; None where there is none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or None


def version_of(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b in (None, 0) else round(a / b, 3)


def difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def derive(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Added latency over the floor, throughput as a fraction of the floor's, the goals."""
    floor = results["floor"]["miss"]
    floor_seq, floor_rps = floor["sequential"], floor["concurrent"]["requests_per_s"]
    added_p50, added_p99, fraction, hit_p50, hit_added_p50 = {}, {}, {}, {}, {}
    for name, result in results.items():
        if name == "floor":
            continue
        miss = result.get("miss")
        if miss:
            added_p50[name] = difference(miss["sequential"].get("p50_ms"), floor_seq["p50_ms"])
            added_p99[name] = difference(miss["sequential"].get("p99_ms"), floor_seq["p99_ms"])
            fraction[name] = ratio(miss["concurrent"]["requests_per_s"], floor_rps)
        hit = result.get("hit")
        if hit:
            hit_p50[name] = hit["sequential"].get("p50_ms")
            # over the floor: what the proxy's hit costs beyond an upstream that does nothing,
            # through the same client (the openai client's own CPU is ~1 ms of any REST call)
            if name != "gateway_grpc":  # another client than the floor's: no fair difference
                hit_added_p50[name] = difference(hit_p50[name], floor_seq["p50_ms"])
    derived: dict[str, Any] = {
        "added_p50_ms": added_p50,
        "added_p99_ms": added_p99,
        "throughput_fraction_of_floor": fraction,
        "hit_p50_ms": hit_p50,
        "hit_added_p50_ms": hit_added_p50,
    }
    proxy_cpu = {
        name: results[name]["miss"]["cpu_ms_per_request"].get(process)
        for name, process in (
            ("gateway", "gateway"),
            ("litellm", "litellm"),
            ("litellm_cache", "litellm_cache"),
        )
        if name in results and results[name].get("miss")
    }
    derived["proxy_cpu_ms_per_miss"] = proxy_cpu
    # the gateway's own CPU per miss on each door (a figure the machine's load moves far less
    # than throughput), and what the whole machine spends per request on each target's path:
    # on a machine whose cores the upstream, the gateway, Redis and the clients share, the
    # throughput fraction cannot pass the floor's machine CPU over the target's
    doors = (("gateway", "gateway"), ("gateway_grpc", "gateway"),
             ("gateway_compare", "gateway_compare"))  # fmt: skip
    gateway_cpu = {
        name: results[name]["miss"]["cpu_ms_per_request"].get(process)
        for name, process in doors
        if name in results and results[name].get("miss")
    }
    derived["gateway_cpu_ms_per_miss"] = gateway_cpu
    machine = {
        name: round(sum(result["miss"]["cpu_ms_per_request"].values()), 3)
        for name, result in results.items()
        if result.get("miss")
    }
    derived["machine_cpu_ms_per_miss"] = machine
    derived["cpu_bound_fraction_of_floor"] = {
        name: ratio(machine["floor"], cpu) for name, cpu in machine.items() if name != "floor"
    }
    if "litellm" in results:
        derived["gateway_vs_litellm"] = {
            "added_p50": ratio(added_p50.get("gateway"), added_p50.get("litellm")),
            "added_p99": ratio(added_p99.get("gateway"), added_p99.get("litellm")),
            "miss_p50": ratio(
                results["gateway"]["miss"]["sequential"]["p50_ms"],
                results["litellm"]["miss"]["sequential"]["p50_ms"],
            ),
            "throughput": ratio(fraction.get("gateway"), fraction.get("litellm")),
            "proxy_cpu_per_miss": ratio(proxy_cpu.get("gateway"), proxy_cpu.get("litellm")),
        }
    if "litellm_cache" in results:
        derived["gateway_vs_litellm_cache"] = {
            "added_p50": ratio(added_p50.get("gateway"), added_p50.get("litellm_cache")),
            "throughput": ratio(fraction.get("gateway"), fraction.get("litellm_cache")),
            "hit_p50": ratio(hit_p50.get("gateway"), hit_p50.get("litellm_cache")),
            "hit_throughput": ratio(
                results["gateway"]["hit"]["concurrent"]["requests_per_s"],
                results["litellm_cache"]["hit"]["concurrent"]["requests_per_s"],
            ),
        }
    if "gateway_compare" in results:
        compare = results["gateway_compare"]
        derived["gateway_vs_compare"] = {
            "added_p50": ratio(added_p50.get("gateway"), added_p50.get("gateway_compare")),
            "added_p99": ratio(added_p99.get("gateway"), added_p99.get("gateway_compare")),
            "throughput": ratio(fraction.get("gateway"), fraction.get("gateway_compare")),
            "proxy_cpu_per_miss": ratio(
                results["gateway"]["miss"]["cpu_ms_per_request"].get("gateway"),
                compare["miss"]["cpu_ms_per_request"].get("gateway_compare"),
            ),
            "hit_p50": ratio(hit_p50.get("gateway"), hit_p50.get("gateway_compare")),
        }
    gw = results["gateway"]
    derived["goals"] = {
        "miss_added_p50_le_2ms": _le(added_p50.get("gateway"), 2.0),
        "miss_added_p99_le_5ms": _le(added_p99.get("gateway"), 5.0),
        "miss_throughput_ge_80pct": None
        if fraction.get("gateway") is None
        else fraction["gateway"] >= 0.8,
        "hit_p50_grpc_le_0_5ms": _le(hit_p50.get("gateway_grpc"), 0.5),
        "hit_p50_rest_le_1ms": _le(gw["hit"]["sequential"].get("p50_ms"), 1.0),
        # the same over the floor (the openai client and the loopback round trip taken out)
        "hit_added_p50_rest_le_1ms": _le(hit_added_p50.get("gateway"), 1.0),
    }
    return derived


def _le(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def print_table(results: dict[str, dict[str, Any]], derived: dict[str, Any], labels: dict) -> None:
    header = (
        f"{'target':<24}{'path':<6}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'+p50':>8}{'+p99':>8}"
        f"{'rps@c':>9}{'x floor':>9}{'c p50':>8}{'proxy cpu':>10}{'client cpu':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, result in results.items():
        for path in ("miss", "hit"):
            figures = result.get(path)
            if not figures:
                continue
            seq, conc, cpu = (
                figures["sequential"],
                figures["concurrent"],
                figures["cpu_ms_per_request"],
            )
            added50 = derived["added_p50_ms" if path == "miss" else "hit_added_p50_ms"].get(name)
            added99 = derived["added_p99_ms"].get(name) if path == "miss" else None
            fraction = derived["throughput_fraction_of_floor"].get(name) if path == "miss" else None
            proxy = cpu.get({"gateway_grpc": "gateway"}.get(name, name))
            print(
                f"{labels[name]:<24}{path:<6}{_f(seq.get('p50_ms'))}{_f(seq.get('p90_ms'))}"
                f"{_f(seq.get('p99_ms'))}{_f(added50, 8)}{_f(added99, 8)}"
                f"{_f(conc['requests_per_s'], 9, 0)}{_f(fraction, 9, 2)}"
                f"{_f(conc.get('p50_ms'), 8, 1)}{_f(proxy, 10)}{_f(cpu.get('client'), 11)}"
            )
    print(
        "p50/p90/p99: sequential latency; +p50/+p99: over the floor's (a hit's too: against an "
        "upstream that answers at once, through the same client); rps@c: requests/s at the "
        "concurrency; x floor: that over the floor's; c p50: latency at the concurrency (ms); "
        "proxy/client cpu: CPU ms per request of the proxy process and of this client process"
    )


def _f(value: float | None, width: int = 9, digits: int = 3) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


# -- scoring through another gateway --------------------------------------------------------------
SCORER = "scorer"
SCORE_CANDIDATES = [" go north", " open the fridge", " take the egg", " turn on the stove",
                    " cook the egg", " wait"]  # fmt: skip
SCORE_PATHS = {  # path -> the gateway it is asked at, and the model there
    "local": ("back", SCORER),
    "engine_token_ids": ("front", "scorer-engine"),
    "engine_text": ("front", "scorer-engine-text"),
}


def start_score_gateways(workdir: Path, model_path: str) -> tuple[Gateway, Gateway]:
    """The back gateway (the local model, no cache) and the front gateway scoring through it
    (`openai` backend, score: true, with and without the model's tokenizer; no cache)."""
    back_token, front_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    quiet: dict[str, Any] = {"cache": {"backend": "none"}, "ledger": {"backend": "memory"}}
    back_settings = {
        "default_model": SCORER,
        "models": {SCORER: {"backend": "hf", "path": model_path, "dtype": "float32"}},
        **quiet,
    }
    back = start_service(workdir, "score-back", back_settings, {"LLMRL_TOKEN": back_token})
    engine = {"backend": "openai", "base_url": f"{back.url}/v1", "remote_model": SCORER,
              "api_key_env": "BENCH_SCORE_BACK_KEY", "score": True, "max_retries": 0}  # fmt: skip
    front_settings = {
        "default_model": "scorer-engine",
        "models": {
            "scorer-engine": {**engine, "tokenizer": model_path},
            "scorer-engine-text": engine,
        },
        **quiet,
    }
    front_env = {"LLMRL_TOKEN": front_token, "BENCH_SCORE_BACK_KEY": back_token}
    front = start_service(workdir, "score-front", front_settings, front_env)
    return back, front


def start_service(
    workdir: Path, name: str, settings: dict[str, Any], env: dict[str, str]
) -> Gateway:
    """`llmrl serve llm_gateway` with `settings`, REST only, in a folder of its own."""
    folder = workdir / name
    folder.mkdir()
    config = folder / "gateway.yaml"
    config.write_text(yaml.safe_dump(settings))
    port, log = free_port(), folder / "gateway.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "serve", "llm_gateway", "--host", "127.0.0.1",
         "--port", str(port), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"),  # noqa: SIM115
        env={**base_env(), "LLMRL_HOME": str(folder / "home"), **env},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{url}/health", process, log, 300, name)
    return Gateway(process, url, "", env["LLMRL_TOKEN"], "none", log)


def score_prompt(number: int) -> str:
    return (
        f"Episode {number}. You are in a kitchen. You see a fridge, a stove and a door to the "
        "north. The fridge holds eggs and milk. Your goal: cook an egg and eat it. You have "
        f"taken {number % 7} steps. What do you do next? Next action:"
    )


def score_phase(args: argparse.Namespace, back: Gateway, front: Gateway) -> dict[str, Any]:
    """Sequential /v1/score requests on each path, interleaved (each request's paths in a
    rotating order), the same prompt on every path: latency, CPU per request, parity."""
    clients = {
        gateway_name: httpx.Client(
            base_url=gateway.url,
            timeout=300,
            headers={
                "Authorization": f"Bearer {gateway.token}",
                "X-LLMRL-Cache": "bypass",
                "X-LLMRL-Run": "bench-score",
            },
        )
        for gateway_name, gateway in (("back", back), ("front", front))
    }
    meter = CpuMeter({"back": back.process.pid, "front": front.process.pid})

    def score(path: str, prompt: str) -> list[float]:
        gateway_name, model = SCORE_PATHS[path]
        body = {"model": model, "prompt": prompt, "candidates": SCORE_CANDIDATES}
        response = clients[gateway_name].post("/v1/score", json=body)
        response.raise_for_status()
        return response.json()["logprobs"]

    for path in SCORE_PATHS:  # warm up: the models load, the first passes run
        for number in range(2):
            score(path, score_prompt(-1 - number))
    times: dict[str, list[float]] = {path: [] for path in SCORE_PATHS}
    cpu: dict[str, dict[str, float]] = {path: {} for path in SCORE_PATHS}
    differences: dict[str, float] = {path: 0.0 for path in SCORE_PATHS if path != "local"}
    paths, number = list(SCORE_PATHS), 0
    for round_index in range(args.score_rounds):
        for _ in range(args.score_requests):
            prompt, number = score_prompt(number), number + 1
            shift = number % len(paths)
            scores = {}
            for path in paths[shift:] + paths[:shift]:
                with meter.phase(cpu[path]):
                    started = time.perf_counter()
                    scores[path] = score(path, prompt)
                    times[path].append(time.perf_counter() - started)
            for path in differences:
                gap = max(abs(a - b) for a, b in zip(scores[path], scores["local"], strict=True))
                differences[path] = max(differences[path], gap)
        print(f"score round {round_index + 1}/{args.score_rounds} done; load {loads()}",
              flush=True)  # fmt: skip
    for client in clients.values():
        client.close()
    requests = args.score_rounds * args.score_requests
    paths_report = {
        path: {
            **summary(times[path]),
            "cpu_ms_per_request": {
                name: round(seconds * 1000 / requests, 3) for name, seconds in cpu[path].items()
            },
        }
        for path in SCORE_PATHS
    }
    local = paths_report["local"]
    return {
        "model": args.score_model,
        "candidates": len(SCORE_CANDIDATES),
        "requests_per_path": requests,
        "paths": paths_report,
        "added_p50_ms": {
            path: difference(paths_report[path].get("p50_ms"), local.get("p50_ms"))
            for path in differences
        },
        "added_mean_ms": {
            path: difference(paths_report[path].get("mean_ms"), local.get("mean_ms"))
            for path in differences
        },
        "ratio_p50_to_local": {
            path: ratio(paths_report[path].get("p50_ms"), local.get("p50_ms"))
            for path in differences
        },
        "max_abs_logprob_difference": {path: float(f"{v:.3g}") for path, v in differences.items()},
    }


def run_score(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The score phase with its two gateways, stopped afterwards; an error is reported."""
    back = front = None
    try:
        back, front = start_score_gateways(workdir, args.score_model)
        return score_phase(args, back, front)
    except (RuntimeError, httpx.HTTPError) as exc:
        print(f"score phase failed: {exc}", flush=True)
        return {"error": str(exc)[-2000:]}
    finally:
        for gateway in (front, back):
            if gateway is not None:
                stop(gateway.process)


def print_score(report: dict[str, Any]) -> None:
    if "paths" not in report:
        return
    print(f"score through a gateway ({report['model']}, {report['candidates']} candidates, "
          f"{report['requests_per_path']} requests per path)")  # fmt: skip
    for path, figures in report["paths"].items():
        added = report["added_p50_ms"].get(path)
        print(
            f"  {path:<18} p50 {_f(figures.get('p50_ms'))} ms  mean {_f(figures.get('mean_ms'))}"
            f" ms  added p50 {_f(added)} ms  max |diff| "
            f"{report['max_abs_logprob_difference'].get(path, '-')}"
        )


# -- main -----------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--requests", type=int, default=300, help="sequential requests per target, path and round"
    )
    parser.add_argument(
        "--concurrent-requests",
        type=int,
        default=None,
        help="requests per target, path and round at --concurrency clients (default: 800, or "
        "--requests when that is smaller than 300)",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up requests per target")
    parser.add_argument(
        "--skip-litellm",
        action="store_true",
        help="leave LiteLLM out (no PyPI needed): the floor and the gateway only",
    )
    parser.add_argument(
        "--litellm-version", default=LITELLM_VERSION, help="the litellm[proxy] version to install"
    )
    parser.add_argument(
        "--litellm-venv",
        type=Path,
        default=CACHE_DIR / "litellm-venv",
        help="the virtual environment LiteLLM is installed into (created on first use)",
    )
    parser.add_argument(
        "--compare-gateway",
        type=Path,
        default=None,
        metavar="DIR",
        help="also measure (REST) the gateway of another llmrl package: DIR holds it as "
        "DIR/llmrl (e.g. a copy of services/ from before a change), for before/after figures "
        "from one run",
    )
    parser.add_argument(
        "--keep-logs", type=Path, default=None, help="copy the services' logs to this folder"
    )
    parser.add_argument(
        "--skip-score", action="store_true", help="leave out scoring through another gateway"
    )
    parser.add_argument(
        "--score-only", action="store_true", help="run the scoring through a gateway alone"
    )
    parser.add_argument(
        "--score-requests", type=int, default=10, help="score requests per path and round"
    )
    parser.add_argument("--score-rounds", type=int, default=3, help="interleaved score rounds")
    parser.add_argument(
        "--score-model",
        default="builtin:smollm2-135m-instruct",
        help="the local model the back gateway scores with (a path or builtin: name)",
    )
    parser.add_argument(
        "--serve-upstream", type=int, default=None, metavar="PORT",
        help="internal: serve the stand-in upstream on 127.0.0.1:PORT and nothing else",
    )  # fmt: skip
    args = parser.parse_args()
    if args.serve_upstream is not None:
        serve_upstream(args.serve_upstream)
        return
    if args.concurrent_requests is None:
        args.concurrent_requests = 800 if args.requests >= 300 else args.requests
    if args.score_only:
        run_score_only(args)
        return
    run(args)


def run_score_only(args: argparse.Namespace) -> None:
    load_start = loads()
    with tempfile.TemporaryDirectory(prefix="llmrl-bench-score-") as tmp:
        score = run_score(args, Path(tmp))
    print()
    print_score(score)
    report = {
        "bench": "gateway_peers",
        "settings": {"score_requests": args.score_requests, "score_rounds": args.score_rounds},
        "load": {"start": load_start, "end": loads(), "cpus": os.cpu_count()},
        "score_through_gateway": score,
    }
    print(json.dumps(report))


@dataclass
class Services:
    """Every process of the bench, and the names whose CPU time is read."""

    workdir: Path
    upstream: str = ""
    gateway: Gateway | None = None
    compare: Gateway | None = None
    proxies: dict[str, LiteLLM] = field(default_factory=dict)
    processes: list[subprocess.Popen] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    litellm_error: str | None = None

    def add(self, name: str, process: subprocess.Popen | None) -> None:
        if process is not None:
            self.processes.append(process)
            self.pids[name] = process.pid

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop(process)


def start_services(args: argparse.Namespace, services: Services) -> None:
    workdir = services.workdir
    python = None
    if not args.skip_litellm:  # installed first: a failed install leaves no process behind
        try:
            python = litellm_python(args.litellm_venv, args.litellm_version)
        except (subprocess.CalledProcessError, OSError) as exc:
            services.litellm_error = f"cannot install litellm[proxy]=={args.litellm_version}: {exc}"
            print(services.litellm_error, flush=True)
    upstream_process, services.upstream = start_upstream(workdir)
    services.add("upstream", upstream_process)
    redis_process, redis_url = start_redis(workdir)
    services.add("redis", redis_process)
    services.gateway = start_gateway(workdir, services.upstream, redis_url)
    services.add("gateway", services.gateway.process)
    if args.compare_gateway is not None:
        services.compare = start_gateway(
            workdir, services.upstream, redis_url, args.compare_gateway
        )
        services.add("gateway_compare", services.compare.process)
    if python is None:
        return
    try:
        for cache in (False, True):
            name = "litellm_cache" if cache else "litellm"
            proxy = start_litellm(workdir, python, services.upstream, cache)
            services.add(name, proxy.process)
            services.proxies[name] = proxy
    except RuntimeError as exc:
        services.litellm_error = str(exc)
        print(f"LiteLLM left out: {exc}", flush=True)
        for proxy in services.proxies.values():
            stop(proxy.process)
        services.proxies.clear()


def make_targets(services: Services) -> list[Target]:
    gateway, upstream = services.gateway, services.upstream
    assert gateway is not None
    os.environ["LLMRL_TOKEN"] = gateway.token  # what the gRPC client sends
    for variable in [v for v in os.environ if v.startswith("LLMRL_TLS")]:
        del os.environ[variable]  # the services run without TLS (base_env): so do the clients
    rest_run = {"X-LLMRL-Run": "bench-rest"}
    targets = [
        openai_target(
            "floor", "upstream (floor)", f"{upstream}/v1", "sk-bench-upstream-key", False,
            ["upstream"],
        ),
        openai_target(
            "gateway", "gateway REST", f"{gateway.url}/v1", gateway.token, True,
            ["gateway", "redis", "upstream"], rest_run,
        ),
        grpc_target(gateway.grpc_address, "bench-grpc"),
    ]  # fmt: skip
    if services.compare is not None:
        compare = services.compare
        targets.append(
            openai_target(
                "gateway_compare", "gateway REST (compare)", f"{compare.url}/v1", compare.token,
                True, ["gateway_compare", "redis", "upstream"], rest_run,
            )
        )  # fmt: skip
    for name, proxy in services.proxies.items():
        label = "LiteLLM (cache)" if proxy.cache else "LiteLLM (no cache)"
        targets.append(
            openai_target(
                name, label, f"{proxy.url}/v1", proxy.key, proxy.cache, [name, "upstream"]
            )
        )
    return targets


def collect_usage(services: Services, bench: Bench) -> dict[str, dict[str, Any]]:
    gateways = [("gateway", services.gateway, "bench-rest"),
                ("gateway_grpc", services.gateway, "bench-grpc"),
                ("gateway_compare", services.compare, "bench-rest")]  # fmt: skip
    usage = {
        name: gateway_usage(gateway, run_id, bench.sent[name], bench.misses(name))
        for name, gateway, run_id in gateways
        if gateway is not None
    }
    for name, proxy in services.proxies.items():
        usage[name] = litellm_usage(proxy)
    return usage


def run(args: argparse.Namespace) -> None:
    load_start = loads()
    with tempfile.TemporaryDirectory(prefix="llmrl-bench-peers-") as tmp:
        services = Services(Path(tmp))
        try:
            start_services(args, services)
            targets = make_targets(services)
            figures, bench, round_loads = run_rounds(args, targets, services)
            results = {
                t.name: {
                    path: figures[(t.name, path)].result(t.processes)
                    for path in ("miss", "hit")
                    if (t.name, path) in figures
                }
                for t in targets
            }
            usage = collect_usage(services, bench)
            assert services.gateway is not None
            gateway_log_lines = len(services.gateway.log.read_text(errors="replace").splitlines())
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in services.workdir.rglob("*.log"):  # gateway/gateway.log: gateway.log
                    named = log.name if log.parent == services.workdir else f"{log.parent.name}.log"
                    shutil.copy(log, args.keep_logs / named)
        finally:
            services.stop()
        # after the others: its model's passes would load the machine under their rounds
        score = None if args.skip_score else run_score(args, Path(tmp))

    labels = {t.name: t.label for t in targets}
    derived = derive(results)
    print()
    print_table(results, derived, labels)
    print()
    for name, record in usage.items():
        print(f"usage/cost recorded by {labels[name]}: {record['recorded']} ({record['where']})")
    if score is not None:
        print_score(score)
    report = {
        "bench": "gateway_peers",
        "settings": {
            "requests": args.requests,
            "concurrent_requests": args.concurrent_requests,
            "concurrency": args.concurrency,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "max_tokens": MAX_TOKENS,
            "gateway_storage": services.gateway.storage,
        },
        "load": {"start": load_start, "rounds": round_loads, "end": loads(),
                 "cpus": os.cpu_count()},
        "machine": {"cpu_model": cpu_model(), "cpus": os.cpu_count()},
        "versions": {
            "python": platform.python_version(),
            "llmrl": version_of("llmrl"),
            "openai": version_of("openai"),
            "fastapi": version_of("fastapi"),
            "uvicorn": version_of("uvicorn"),
            "grpcio": version_of("grpcio"),
            "litellm": args.litellm_version if services.proxies else None,
        },
        "litellm_error": services.litellm_error,
        "targets": results,
        "usage": usage,
        "gateway_log_lines": gateway_log_lines,
        "score_through_gateway": score,
        "notes": {
            "gateway_grpc": "measured with the gateway's gRPC client, the floor with the openai "
            "client (CPU per call: client_cpu in cpu_ms_per_request): its added_* figures mix "
            "the two clients, and its hit has no hit_added_p50_ms",
            "cpu_ms_per_request": "CPU time per request of each process over the phase (/proc), "
            "sequential and concurrent requests together; 'client' is this bench's process",
            "cpu_bound_fraction_of_floor": "the floor's machine CPU per request (client + "
            "upstream) over each target's (client + upstream + Redis + proxy): the throughput "
            "fraction a machine whose cores all these processes share could reach at most if "
            "its cores were the only limit; machine_cpu_ms_per_miss holds the sums",
        },
        **derived,
    }  # fmt: skip
    print(json.dumps(report))


def run_rounds(
    args: argparse.Namespace, targets: list[Target], services: Services
) -> tuple[dict[tuple[str, str], PathFigures], Bench, list[list[float]]]:
    """Warm every target up, then the rounds: each target in turn, each round starting at
    the next one, so that a change in the machine's load falls on all targets alike."""
    bench = Bench(args, CpuMeter(services.pids), services.upstream)
    for target in targets:
        bench.warm_up(target)
    figures: dict[tuple[str, str], PathFigures] = {}
    round_loads = []
    for round_index in range(args.rounds):
        shift = round_index % len(targets)  # each round starts at the next target
        for target in targets[shift:] + targets[:shift]:
            for path in ("miss", "hit") if target.has_cache else ("miss",):
                key = (target.name, path)
                figures.setdefault(key, PathFigures())
                bench.measure(target, path, figures[key])
        round_loads.append(loads())
        print(f"round {round_index + 1}/{args.rounds} done; load {round_loads[-1]}", flush=True)
    return figures, bench, round_loads


if __name__ == "__main__":
    main()
