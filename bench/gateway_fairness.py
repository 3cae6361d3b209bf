"""One tenant cannot starve another (the gateway's per-key limits and fair gate): one issued key
bursts N concurrent generations at a local model while another key sends one-token requests;
how much slower are the other key's requests under the burst than on an idle gateway?

Processes, all on 127.0.0.1: `llmrl serve llm_gateway` (auth on, cache off, ledger in memory)
serving one local model: the tiny random Llama of the tests (2 layers, 32 wide, SmolLM2's
tokenizer; built into a temporary folder) or, with `--model smollm2`, the built-in SmolLM2.
The gateway is started once per mode, each with its own limits:

- off: no per-key limits (`limits.key_max_concurrent` 1024, `key_tokens_per_minute` null) and
  no fair gate (`limits.fair_queue` false): the gateway as it was, every request straight into
  the model's first-come batching queue;
- fair_queue: the fair gate only (a local model holds at most its batch; waiting requests are
  let in tenant by tenant), no per-key limit;
- on: the defaults (the fair gate, a key's requests in flight capped at half the model's batch,
  its tokens per minute at `limits.key_tokens_per_minute`);
- on_batch_depth: the defaults, but a shared model holds its whole batch (`fair_queue_depth`
  = --batch) where a deterministic one holds 1 request by default: what that part adds.

In each mode, on one gateway: first the idle figure (the probe key alone: --probes sequential
one-token requests), then the burst: the burst key keeps --burst requests of --burst-tokens
tokens in flight from as many threads (a refused one, 429, is sent again after its
Retry-After, at most --retry-pause s: a client as eager as the SDK's retries allow), and once
the burst is under way the probe key sends --probes sequential one-token requests again. Each
mode's figures are ratios to its own idle figure, so the machine's load cancels out. Goal: the
probe's p50 under the burst within 2x of idle.

    python bench/gateway_fairness.py [--model tiny|smollm2] [--burst 48] [--burst-tokens 32]
        [--probes 30] [--modes off,fair_queue,on]

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
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

MODEL = "bench-model"
UNLIMITED_KEYS = {"key_max_concurrent": 1024, "key_tokens_per_minute": None}
MODES: dict[str, dict[str, Any]] = {  # each mode's `limits` ("BATCH": --batch)
    "off": {**UNLIMITED_KEYS, "fair_queue": False},
    "fair_queue": {**UNLIMITED_KEYS, "fair_queue": True},
    "on": {},  # the defaults
    "on_batch_depth": {"fair_queue_depth": "BATCH"},
}
GOAL_P50_RATIO = 2.0


# -- the model ----------------------------------------------------------------------------------
def make_tiny_llama(path: Path) -> Path:
    """The tests' tiny random Llama (tests/support/tiny_llm.py): 2 layers, 32 wide, SmolLM2's
    tokenizer, seeded weights."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from llmrl.llm_gateway.local_models import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        initializer_range=0.5, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        tie_word_embeddings=True,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def deterministic_default() -> bool | None:
    """Whether the checkout's hf models are deterministic by default (rows at batch 1)."""
    from llmrl.llm_gateway.settings import backend_settings_model

    field = backend_settings_model("hf").model_fields.get("deterministic")
    return None if field is None else bool(field.default)


def model_settings(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    if args.model == "smollm2":
        path = "builtin:smollm2-135m-instruct"
    else:
        path = str(make_tiny_llama(workdir / "tiny-llama"))
    return {
        "backend": "hf",
        "path": path,
        "dtype": "float32",
        "max_batch_size": args.batch,
        "max_wait_ms": 5,
        "timeout_s": 600,
    }


# -- the gateway --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Gateway:
    process: subprocess.Popen
    url: str
    token: str
    log: Path

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def mode_limits(mode: str, batch: int) -> dict[str, Any]:
    return {key: batch if value == "BATCH" else value for key, value in MODES[mode].items()}


def start_gateway(workdir: Path, mode: str, model: dict[str, Any]) -> Gateway:
    token = secrets.token_urlsafe(24)
    folder = workdir / mode
    folder.mkdir()
    settings = {
        "default_model": MODEL,
        "torch_threads": 1,  # a busy shared machine: one torch thread is the fast choice
        "models": {MODEL: model},
        "cache": {"backend": "none"},
        "ledger": {"backend": "memory"},
        "limits": mode_limits(mode, model["max_batch_size"]),
    }
    config = folder / "gateway.yaml"
    config.write_text(yaml.safe_dump(settings))
    env = {k: v for k, v in os.environ.items()
           if k != "LLMRL_LLM_GATEWAY_CONFIG" and not k.startswith("LLMRL_TLS")}  # fmt: skip
    env.update({"LLMRL_HOME": str(folder / "home"), "LLMRL_TOKEN": token})
    port, log = free_port(), folder / "gateway.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "serve", "llm_gateway", "--host", "127.0.0.1",
         "--port", str(port), "--grpc-port", str(free_port()), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"), env=env,  # noqa: SIM115
    )  # fmt: skip
    gateway = Gateway(process, f"http://127.0.0.1:{port}", token, log)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the gateway exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{gateway.url}/health", timeout=2).status_code == 200:
                return gateway
        time.sleep(0.2)
    gateway.stop()
    raise RuntimeError(f"the gateway did not come up: {log.read_text()[-2000:]}")


def issue_key(gateway: Gateway, name: str) -> str:
    answer = httpx.post(
        f"{gateway.url}/v1/keys", json={"budget_usd": 1.0, "name": name}, headers=gateway.admin
    )
    answer.raise_for_status()
    return answer.json()["key"]


# -- clients ------------------------------------------------------------------------------------
class Caller:
    """One key's requests, each with a unique prompt (never a cache hit)."""

    unique = itertools.count()

    def __init__(self, gateway: Gateway, key: str, max_tokens: int) -> None:
        self.url, self.max_tokens = gateway.url, max_tokens
        self.client = httpx.Client(
            headers={"Authorization": f"Bearer {key}", "X-LLMRL-Cache": "bypass"}, timeout=900
        )

    def send(self) -> httpx.Response:
        number = next(self.unique)
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"Request {number}: which door is open?"}],
            "max_tokens": self.max_tokens,
            "temperature": 0,
        }
        return self.client.post(f"{self.url}/v1/chat/completions", json=body)

    def timed(self) -> float:
        started = time.perf_counter()
        answer = self.send()
        elapsed = time.perf_counter() - started
        if answer.status_code != 200:
            raise RuntimeError(f"the probe was refused: {answer.status_code} {answer.text}")
        return elapsed


@dataclass
class Burst:
    """--burst threads keeping one request each in flight until stopped."""

    gateway: Gateway
    key: str
    threads: int
    max_tokens: int
    retry_pause_s: float
    outcomes: Counter = field(default_factory=Counter)
    tokens: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> list[threading.Thread]:
        workers = [threading.Thread(target=self._loop, daemon=True) for _ in range(self.threads)]
        for worker in workers:
            worker.start()
        return workers

    def _loop(self) -> None:
        caller = Caller(self.gateway, self.key, self.max_tokens)
        while not self.stop.is_set():
            try:
                answer = caller.send()
            except httpx.HTTPError as exc:
                with self.lock:
                    self.outcomes[type(exc).__name__] += 1
                continue
            with self.lock:
                if answer.status_code == 200:
                    self.outcomes["served"] += 1
                    self.tokens += answer.json()["usage"]["completion_tokens"]
                elif answer.status_code == 429:
                    param = answer.json()["error"]["param"] or "429"
                    self.outcomes[f"429 {param}"] += 1
                else:
                    self.outcomes[str(answer.status_code)] += 1
            if answer.status_code == 429:
                retry = float(answer.headers.get("retry-after", 1))
                self.stop.wait(min(retry, self.retry_pause_s))


def summary(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "max_ms": round(float(ms.max()), 2),
    }


def measure_mode(args: argparse.Namespace, workdir: Path, mode: str, model: dict) -> dict:
    gateway = start_gateway(workdir, mode, model)
    try:
        burst_key, probe_key = issue_key(gateway, "burst"), issue_key(gateway, "probe")
        probe = Caller(gateway, probe_key, 1)
        warm = Caller(gateway, burst_key, args.burst_tokens)
        for _ in range(3):  # load the model, warm its first passes
            warm.send().raise_for_status()
            probe.timed()
        idle = [probe.timed() for _ in range(args.probes)]
        burst = Burst(gateway, burst_key, args.burst, args.burst_tokens, args.retry_pause)
        started = time.perf_counter()
        workers = burst.run()
        time.sleep(args.settle)  # the burst's requests are in the model's queue by now
        under = [probe.timed() for _ in range(args.probes)]
        burst_s = time.perf_counter() - started
        burst.stop.set()
        for worker in workers:
            worker.join(timeout=900)
        idle_s, under_s = summary(idle), summary(under)
        return {
            "idle": idle_s,
            "burst": under_s,
            "p50_ratio": round(under_s["p50_ms"] / idle_s["p50_ms"], 2),
            "p99_ratio": round(under_s["p99_ms"] / idle_s["p99_ms"], 2),
            "burst_outcomes": dict(sorted(burst.outcomes.items())),
            "burst_completion_tokens_per_s": round(burst.tokens / burst_s, 1),
            "limits": mode_limits(mode, args.batch) or "defaults",
        }
    finally:
        gateway.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "bench": "gateway_fairness",
        "model": args.model,
        "batch": args.batch,
        "burst": args.burst,
        "burst_tokens": args.burst_tokens,
        "probes": args.probes,
        "deterministic": deterministic_default(),
        "load": {"start": [round(v, 2) for v in os.getloadavg()]},
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="llmrl-fairness-") as tmp:
        workdir = Path(tmp)
        model = model_settings(args, workdir)
        for mode in args.modes:
            print(f"mode {mode}: ...", flush=True)
            report["modes"][mode] = measure_mode(args, workdir, mode, model)
    report["load"]["end"] = [round(v, 2) for v in os.getloadavg()]
    report["p50_ratio"] = {mode: figures["p50_ratio"] for mode, figures in report["modes"].items()}
    report["p99_ratio"] = {mode: figures["p99_ratio"] for mode, figures in report["modes"].items()}
    report["goal_p50_within_2x"] = {
        mode: ratio <= GOAL_P50_RATIO for mode, ratio in report["p50_ratio"].items()
    }
    return report


def print_table(report: dict[str, Any]) -> None:
    print(
        f"\nthe probe key's one-token requests while another key keeps {report['burst']} "
        f"generations of {report['burst_tokens']} tokens going ({report['model']}, batch "
        f"{report['batch']})"
    )
    header = f"{'mode':<14} {'idle p50':>9} {'idle p99':>9} {'burst p50':>10} {'burst p99':>10}"
    print(header + f" {'p50 x':>7} {'p99 x':>7}  burst key's outcomes")
    for mode, figures in report["modes"].items():
        idle, under = figures["idle"], figures["burst"]
        print(
            f"{mode:<14} {idle['p50_ms']:>7.1f}ms {idle['p99_ms']:>7.1f}ms "
            f"{under['p50_ms']:>8.1f}ms {under['p99_ms']:>8.1f}ms "
            f"{figures['p50_ratio']:>6.1f}x {figures['p99_ratio']:>6.1f}x  "
            f"{figures['burst_outcomes']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        choices=("tiny", "smollm2"),
        default="tiny",
        help="the model both keys share: a tiny random Llama, or the local SmolLM2-135M",
    )
    parser.add_argument("--batch", type=int, default=8, help="the model's max_batch_size")
    parser.add_argument("--burst", type=int, default=48, help="the burst key's concurrent requests")
    parser.add_argument(
        "--burst-tokens", type=int, default=32, help="max_tokens of each burst request"
    )
    parser.add_argument("--probes", type=int, default=30, help="one-token probe requests per phase")
    parser.add_argument(
        "--settle", type=float, default=1.0, help="seconds between the burst's start and the probes"
    )
    parser.add_argument(
        "--retry-pause", type=float, default=0.25,
        help="the longest a refused burst request waits before it is sent again (its Retry-After, "
        "at most this)",
    )  # fmt: skip
    parser.add_argument(
        "--modes", type=lambda text: text.split(","), default=list(MODES),
        help="comma-separated: " + ", ".join(MODES),
    )  # fmt: skip
    args = parser.parse_args()
    unknown = [mode for mode in args.modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    report = run(args)
    print_table(report)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
