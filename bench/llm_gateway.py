"""LLM gateway figures: cache-hit latency through gRPC and REST, local generation throughput
with 1, 4 and 8 concurrent clients (dynamic batching) and its ratio to sequential, and the
latency of scoring 6 candidates after a ~140-token prompt (cold, and with a prefix shared
with the previous prompt, as a planner's fixed instructions before a new observation).

The gateway runs as a real service process (`llmrl serve llm_gateway`, default model
SmolLM2-135M-Instruct, Redis cache on a private redis-server when one is on PATH, else SQLite);
this process is the client. Targets (issue 3): cache hit p50 <= 1 ms via gRPC; >= 3x sequential
throughput at 8 clients; score <= 150 ms.

Then, against their limits (issue 56), in this process on the same weights with transformers
directly (after the service has stopped, same torch threads): scoring by the gateway's own
scorer (cold and with a shared prefix), by K naive forwards of prompt + candidate and the way
Lamorel does it (`pre_encode_inputs`: the prompt once, the candidates batched on its past key
values), each as a ratio to one forward pass of the prompt alone (goal: score <= 1.3x); and
the raw model's batch-8 / batch-1 decoding throughput, the most that batching 8 clients can
give (goal: 8 clients >= 5x sequential). Measure on a shared machine as ratios within a run;
the load average is printed beside them.

Both settings of the `hf` model's `deterministic` (each request computed in passes of its own
shape, so that its answer is bitwise the same alone or batched; the default) are measured side
by side: the service serves the same weights as `smollm2` (deterministic) and
`smollm2-batched` (`deterministic: false`, the batched path), and the figures under
`deterministic` give, for both, scoring time as a ratio to one forward of the prompt (target
<= 1.3x, in-process and through the service) and 8 concurrent clients' throughput as a ratio
to one client's (generation and scoring; target >= 4x).

    python bench/llm_gateway.py [--hits 500] [--max-tokens 32] [--rounds 2] [--clients 1,4,8]
                                [--torch-threads 1] [--limit-repeats 15] [--skip-service]

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import numpy as np
import yaml

from llmrl.llm_gateway.client import connect

DETERMINISTIC, BATCHED = "smollm2", "smollm2-batched"  # the service's two settings of one model
BUILTIN_SMOLLM2 = {"backend": "hf", "path": "builtin:smollm2-135m-instruct", "dtype": "auto",
                   "max_batch_size": 8, "max_wait_ms": 5}  # fmt: skip
PROMPT_140 = (
    "You are an agent in a grid world. The room is 8 by 8 cells and surrounded by walls. "
    "You see a red key two cells to your left, a locked red door in the north wall, a blue "
    "ball in the corner and a green box next to the door. Your mission is to open the red "
    "door and reach the goal square behind it. You can carry one object at a time; to open "
    "a locked door you must carry the key of its colour. Earlier you tried to open the door "
    "without the key and failed. Choose the single best next skill from the list."
)
CANDIDATES = [
    " go to the red key",
    " pick up the red key",
    " open the red door",
    " go to the blue ball",
    " toggle the green box",
    " drop the ball",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.array(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}  # fmt: skip


def start_redis(workdir: Path) -> tuple[subprocess.Popen | None, str | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        return None, None
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return process, f"redis://127.0.0.1:{port}/0"


def start_gateway(
    workdir: Path, redis_url: str | None, torch_threads: int | None
) -> tuple[subprocess.Popen, int, int]:
    cache = {"backend": "redis", "redis_url": redis_url} if redis_url else {
        "backend": "sqlite", "sqlite_path": str(workdir / "cache.sqlite")}  # fmt: skip
    config = workdir / "gateway.yaml"
    ledger = {"backend": "redis", "redis_url": redis_url} if redis_url else {"backend": "memory"}
    settings = {"cache": cache, "ledger": ledger, "torch_threads": torch_threads, "models": {
        DETERMINISTIC: {"deterministic": True},  # the default, said here for the reader
        BATCHED: {**BUILTIN_SMOLLM2, "deterministic": False},
    }}  # fmt: skip
    config.write_text(yaml.safe_dump(settings))
    port, grpc_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "serve", "llm_gateway", "--port", str(port),
         "--grpc-port", str(grpc_port), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=open(workdir / "gateway.log", "w"),  # noqa: SIM115
        env={**os.environ, "LLMRL_HOME": str(workdir)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the gateway exited: {(workdir / 'gateway.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return process, port, grpc_port
        except httpx.HTTPError:
            time.sleep(0.2)
    sys.exit("the gateway did not come up in 120 s")


def cache_hits(client, port: int, hits: int) -> dict[str, dict[str, float]]:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    client.chat(messages, max_tokens=16, run_id="bench-hits")  # the miss that fills the cache
    grpc_times = []
    for _ in range(hits):
        started = time.perf_counter()
        result = client.chat(messages, max_tokens=16, run_id="bench-hits")
        grpc_times.append(time.perf_counter() - started)
        assert result.cached
    body = {"model": "smollm2", "messages": messages, "max_tokens": 16}
    rest_times = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
        for _ in range(hits):
            started = time.perf_counter()
            response = http.post("/v1/chat/completions", json=body)
            rest_times.append(time.perf_counter() - started)
            assert response.headers["x-llmrl-cache"] == "hit"
    return {"grpc": percentiles(grpc_times), "rest": percentiles(rest_times)}


def throughput(
    client, clients: int, requests_per_client: int, max_tokens: int, tag: str, model: str = BATCHED
) -> dict:
    """Completion tokens per second with `clients` threads each sending requests in turn."""

    def run(worker: int) -> int:
        tokens = 0
        for i in range(requests_per_client):
            result = client.chat(
                [{"role": "user", "content": f"Tell me a short story about robot {worker}-{i}."}],
                max_tokens=max_tokens, cache=False, run_id="bench-gen", tag=tag, model=model,
            )  # fmt: skip
            tokens += result.completion_tokens
        return tokens

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(run, range(clients)))
    elapsed = time.perf_counter() - started
    return {"clients": clients, "requests": clients * requests_per_client, "tokens": tokens,
            "seconds": round(elapsed, 2), "tokens_per_s": round(tokens / elapsed, 1)}  # fmt: skip


SITUATIONS = [
    "You now carry the red key.",
    "The red door is open now.",
    "You see the goal behind the door.",
    "You dropped the blue ball.",
    "The green box is empty.",
    "You stand next to the red door.",
]


def score_latency(
    client, repeats: int, shared_prefix: bool, model: str = BATCHED
) -> dict[str, float]:
    """Median latency of scoring 6 candidates after a ~140-token prompt.

    Cold (`shared_prefix=False`): every prompt differs from its first token, so nothing of an
    earlier prompt can be reused. Planner-style (`shared_prefix=True`): the same context with a
    new last sentence each time, as a planner's fixed instructions and a new observation.
    """

    def prompt(i: int) -> str:
        if shared_prefix:
            return f"{PROMPT_140} {SITUATIONS[i % len(SITUATIONS)]} (step {i})"
        return f"Episode {i}. {PROMPT_140}"

    client.score(prompt(10_000), CANDIDATES, cache=False, model=model)  # warm-up
    times = []
    for i in range(repeats):
        started = time.perf_counter()
        client.score(prompt(i), CANDIDATES, cache=False, run_id="bench-score", model=model)
        times.append(time.perf_counter() - started)
    return {"prompt_tokens": client.count_tokens(prompt(0)), "candidates": len(CANDIDATES),
            "median_ms": round(median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1)}  # fmt: skip


def score_throughput(client, clients: int, requests_per_client: int, model: str) -> dict:
    """Score requests per second (6 candidates after a ~140-token prompt, every prompt
    different) with `clients` threads each sending requests in turn."""

    def run(worker: int) -> int:
        for i in range(requests_per_client):
            prompt = f"Episode {worker}-{i}. {PROMPT_140}"
            client.score(prompt, CANDIDATES, cache=False, run_id="bench-score", model=model)
        return requests_per_client

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        requests = sum(pool.map(run, range(clients)))
    elapsed = time.perf_counter() - started
    return {"clients": clients, "requests": requests, "seconds": round(elapsed, 2),
            "requests_per_s": round(requests / elapsed, 2)}  # fmt: skip


def concurrency(client, args: argparse.Namespace, model: str) -> dict[str, Any]:
    """Generation and scoring throughput of `model` at each client count, and their ratios
    to one client's (sequential)."""
    throughput(client, 1, 1, 4, "warmup", model)  # first-call costs (and loading the model)
    runs = []
    for count in [int(c) for c in args.clients.split(",")]:
        runs.append(throughput(client, count, args.rounds, args.max_tokens, f"c{count}", model))
        print(f"generation ({model}):", runs[-1], flush=True)
    sequential = next((r for r in runs if r["clients"] == 1), runs[0])["tokens_per_s"]
    generation = {
        f"clients_{r['clients']}": {**r, "ratio_to_sequential":
                                    round(r["tokens_per_s"] / sequential, 2)}
        for r in runs
    }  # fmt: skip
    scores = [score_throughput(client, 1, 8, model), score_throughput(client, 8, 2, model)]
    print(f"score throughput ({model}):", scores, flush=True)
    score_ratio = round(scores[1]["requests_per_s"] / scores[0]["requests_per_s"], 2)
    score = {"clients_1": scores[0], "clients_8": {**scores[1], "ratio_to_sequential": score_ratio}}
    return {"generation": generation, "score": score}


# -- in-process limits: the same weights run directly with transformers in this process ------


def load_local_model(path: str | Path | None = None, dtype: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) as the gateway's `hf` backend loads them on this CPU: the builtin
    SmolLM2 (`llmrl.llm_gateway.local_models.smollm2_dir`) unless `path` names a model dir."""
    import torch  # noqa: F401  (imported here: the service part of the bench needs no torch)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmrl.llm_gateway.local_causal_lm import resolve_dtype
    from llmrl.llm_gateway.local_models import smollm2_dir

    path = Path(path) if path else smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype, _cpu()))
    return model.eval(), tokenizer


def _cpu() -> Any:
    import torch

    return torch.device("cpu")


class ForwardCounter:
    """Counts the model's top-level forward calls (a forward hook): how many passes a scorer
    really ran."""

    def __init__(self, model: Any) -> None:
        self.calls = 0
        self._handle = model.register_forward_hook(self._hook)

    def _hook(self, *_: Any) -> None:
        self.calls += 1

    def close(self) -> None:
        self._handle.remove()


def forward_prompt(model: Any, prompt_ids: list[int]) -> Any:
    """The limit: one forward pass of the prompt alone (KV cache kept, last logits only, as
    the gateway's first scoring pass)."""
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([prompt_ids]), use_cache=True, logits_to_keep=1)


def naive_score(model: Any, prompt_ids: list[int], candidates: list[list[int]]) -> list[float]:
    """Baseline: K separate forwards of prompt + candidate; each candidate's summed
    log-probability."""
    import torch

    scores = []
    with torch.inference_mode():
        for cand in candidates:
            ids = torch.tensor([prompt_ids + cand])
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
            positions = torch.arange(len(prompt_ids) - 1, ids.shape[1] - 1)
            scores.append(float(logprobs[positions, ids[0, positions + 1]].sum()))
    return scores


def lamorel_score(model: Any, prompt_ids: list[int], candidates: list[list[int]]) -> list[float]:
    """Lamorel's `score` with `pre_encode_inputs`: the prompt is encoded once (its past key
    values kept), then the K candidates run as one right-padded batch against the prompt's
    past key values repeated K times; the first candidate token's log-prob comes from the
    prompt's last logits."""
    import torch

    from llmrl.common.token_batches import pad

    with torch.inference_mode():
        out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True, logits_to_keep=1)
        first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        cache = out.past_key_values
        k = len(candidates)
        cache.reorder_cache(torch.zeros(k, dtype=torch.long))  # the prompt once per candidate
        ids, mask = pad(candidates, 0, left=False)
        p = len(prompt_ids)
        inputs = ids[:, :-1] if ids.shape[1] > 1 else ids
        attention = torch.cat([torch.ones((k, p), dtype=mask.dtype), mask[:, : inputs.shape[1]]], 1)
        positions = (p + torch.arange(inputs.shape[1])).expand(k, -1)
        logits = model(
            input_ids=inputs, attention_mask=attention, position_ids=positions,
            past_key_values=cache, use_cache=True,
        ).logits  # fmt: skip
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        scores = []
        for row, cand in enumerate(candidates):
            total = float(first[cand[0]])
            for j in range(1, len(cand)):
                total += float(logprobs[row, j - 1, cand[j]])
            scores.append(total)
    return scores


def gateway_core(model: Any, tokenizer: Any, deterministic: bool = True) -> Any:
    """The gateway's own scorer (`LocalCausalLM`, its defaults on a CPU) on these weights;
    `deterministic=False`: its batched path."""
    from llmrl.llm_gateway.local_causal_lm import (
        LocalCausalLM,
        default_forward_tokens,
    )

    forward_tokens = default_forward_tokens(_cpu())
    return LocalCausalLM(
        model, tokenizer, score_forward_tokens=forward_tokens, deterministic=deterministic
    )


def gateway_score(core: Any, prompt_ids: list[int], candidates: list[list[int]]) -> list[float]:
    """One score request through the gateway's scorer, as its model thread runs it (the
    prefix cache included); each candidate's summed log-probability."""
    from llmrl.llm_gateway.local_causal_lm import ScoreJob

    (rows,) = core.score([ScoreJob(prompt_ids, candidates)])
    return [sum(row[: len(c)]) for row, c in zip(rows, candidates, strict=True)]


def score_limits(
    model: Any, tokenizer: Any, repeats: int, candidates: list[str] = CANDIDATES
) -> dict[str, Any]:
    """Median seconds, in this process, of: one forward of the ~140-token prompt (the limit),
    the gateway's scorer (cold prompts, and prompts sharing a prefix with the previous one),
    K naive forwards and Lamorel-style scoring, rounds interleaved so load drift hits all
    alike; their ratios to the forward, and the forward passes each ran per score. The
    gateway's scorer is measured on its batched path (`gateway_*`) and, under
    `deterministic`, with `deterministic: true` (the same passes for a lone request, except
    that its prefix cache reuses only whole segments of `score_forward_tokens`)."""
    core = gateway_core(model, tokenizer, deterministic=False)
    steady = gateway_core(model, tokenizer, deterministic=True)
    cands = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in candidates]

    def cold(i: int) -> list[int]:
        return core.encode(f"Episode {i}. {PROMPT_140}")

    def shared(i: int) -> list[int]:
        return core.encode(f"{PROMPT_140} {SITUATIONS[i % len(SITUATIONS)]} (step {i})")

    methods: dict[str, Callable[[int], Any]] = {
        "forward": lambda i: forward_prompt(model, cold(i)),
        "gateway_cold": lambda i: gateway_score(core, cold(i), cands),
        "gateway_shared_prefix": lambda i: gateway_score(core, shared(i), cands),
        "naive": lambda i: naive_score(model, cold(i), cands),
        "lamorel": lambda i: lamorel_score(model, cold(i), cands),
        "deterministic_cold": lambda i: gateway_score(steady, cold(i), cands),
        "deterministic_shared_prefix": lambda i: gateway_score(steady, shared(i), cands),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    forwards: dict[str, int] = {}
    counter = ForwardCounter(model)
    try:
        for name, run in methods.items():  # warm-up, and the passes each method runs
            before = counter.calls
            run(10_000)
            forwards[name] = counter.calls - before
        for i in range(repeats):
            for name, run in methods.items():
                started = time.perf_counter()
                run(i)
                times[name].append(time.perf_counter() - started)
    finally:
        counter.close()
    medians = {name: median(samples) for name, samples in times.items()}
    limit = medians["forward"]
    steady_names = [name for name in medians if name.startswith("deterministic_")]
    batched = {name: s for name, s in medians.items() if name not in steady_names}
    return {
        "prompt_tokens": len(cold(0)),
        "candidates": len(cands),
        "repeats": repeats,
        "median_ms": {name: round(s * 1000, 2) for name, s in batched.items()},
        "forwards_per_score": {name: forwards[name] for name in batched},
        "ratio_to_forward": {
            name: round(s / limit, 2) for name, s in batched.items() if name != "forward"
        },
        "deterministic": {
            name.removeprefix("deterministic_"): {
                "median_ms": round(medians[name] * 1000, 2),
                "forwards_per_score": forwards[name],
                "ratio_to_forward": round(medians[name] / limit, 2),
            }
            for name in steady_names
        },
    }


def batch_limit(
    model: Any, tokenizer: Any, repeats: int, batch: int = 8, steps: int = 16
) -> dict[str, Any]:
    """The raw model's decoding throughput at `batch` rows and at 1 (KV-cached forwards of
    one new token per row after a short chat prompt, `steps` per run, medians over
    `repeats`): their ratio is what batching gains on the forward passes alone. Also the
    same through `model.generate` (prefill and its per-step overhead included, paid once per
    batch), as the gateway runs it."""
    import torch

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me a short story about robot 0-0."}],
        add_generation_prompt=True, tokenize=False,
    )  # fmt: skip
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]

    def decode(rows: int) -> float:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids] * rows), use_cache=True, logits_to_keep=1)
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            started = time.perf_counter()
            for step in range(steps):
                position = torch.full((rows, 1), len(ids) + step)
                out = model(
                    input_ids=token, position_ids=position, past_key_values=cache, use_cache=True
                )
                cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            return time.perf_counter() - started

    def generate(rows: int) -> float:
        """`generate` as the gateway calls it (greedy), prefill and per-step overhead in."""
        with torch.inference_mode():
            started = time.perf_counter()
            model.generate(
                input_ids=torch.tensor([ids] * rows), attention_mask=torch.ones((rows, len(ids))),
                max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                pad_token_id=tokenizer.eos_token_id,
            )  # fmt: skip
            return time.perf_counter() - started

    for run in (decode, generate):  # warm-up
        run(1)
        run(batch)
    times: dict[str, list[float]] = {"decode_1": [], "decode_n": [], "gen_1": [], "gen_n": []}
    for _ in range(repeats):
        times["decode_1"].append(decode(1))
        times["decode_n"].append(decode(batch))
        times["gen_1"].append(generate(1))
        times["gen_n"].append(generate(batch))
    tps = {
        name: steps * (batch if name.endswith("_n") else 1) / median(samples)
        for name, samples in times.items()
    }
    return {
        "batch": batch,
        "steps": steps,
        "batch_1_tokens_per_s": round(tps["decode_1"], 1),
        f"batch_{batch}_tokens_per_s": round(tps["decode_n"], 1),
        "ratio": round(tps["decode_n"] / tps["decode_1"], 2),
        "generate_batch_1_tokens_per_s": round(tps["gen_1"], 1),
        f"generate_batch_{batch}_tokens_per_s": round(tps["gen_n"], 1),
        "generate_ratio": round(tps["gen_n"] / tps["gen_1"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hits", type=int, default=500, help="cache hits timed per interface")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per generation")
    parser.add_argument("--rounds", type=int, default=2, help="requests per client")
    parser.add_argument("--clients", default="1,4,8", help="concurrent clients to measure")
    parser.add_argument(
        "--score-repeats", type=int, default=10, help="score requests per median latency"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads in the gateway and for the in-process limits (0: torch's "
        "default). 1 suits a shared 2-core box",
    )
    parser.add_argument(
        "--limit-repeats",
        type=int,
        default=15,
        help="repeats per median of the in-process limits (forward, scorers, batch decoding)",
    )
    parser.add_argument(
        "--skip-service",
        action="store_true",
        help="measure only the in-process limits (no gateway process)",
    )
    args = parser.parse_args()
    figures: dict[str, Any] = {"load_avg": {"start": [round(x, 2) for x in os.getloadavg()]}}
    if not args.skip_service:
        service(args, figures)
    limits(args, figures)
    figures["load_avg"]["end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(figures))


def limits(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """The in-process limits, their ratios, and the goals of issue 56."""
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    model, tokenizer = load_local_model()
    limit = score_limits(model, tokenizer, args.limit_repeats)
    figures["score_limits"] = limit
    print("score vs one forward of the prompt (in-process):", limit, flush=True)
    batching = batch_limit(model, tokenizer, args.limit_repeats, steps=args.max_tokens)
    figures["batch_limit"] = batching
    load = os.getloadavg()
    print("raw model batch-8 / batch-1 (decode, generate):", batching, "load:", load, flush=True)
    ratios = limit["ratio_to_forward"]
    forward_ms = limit["median_ms"]["forward"]
    goals: dict[str, Any] = {
        "score_le_1_3x_forward": ratios["gateway_cold"] <= 1.3,
        "score_shared_prefix_le_1_3x_forward": ratios["gateway_shared_prefix"] <= 1.3,
        "batch_8_limit_ge_5x": batching["ratio"] >= 5.0,
    }
    if "score_6_candidates" in figures:  # end to end over gRPC, same threads, same weights
        ratios["service_cold"] = round(figures["score_6_candidates"]["median_ms"] / forward_ms, 2)
        ratios["service_shared_prefix"] = round(
            figures["score_6_candidates_shared_prefix"]["median_ms"] / forward_ms, 2
        )
        clients_8 = figures["generation"].get("clients_8")
        if clients_8:
            ratio = clients_8["ratio_to_sequential"]
            goals["clients_8_ge_5x_sequential"] = ratio >= 5.0
            goals["clients_8_share_of_batch_limit"] = round(ratio / batching["ratio"], 2)
            goals["clients_8_share_of_generate_limit"] = round(
                ratio / batching["generate_ratio"], 2
            )
    figures["goals_issue_56"] = goals
    figures["deterministic"] = determinism(figures)
    print("deterministic vs batched:", figures["deterministic"], flush=True)


def service(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """The gateway as a service process: cache hits, scoring latency, generation and scoring
    throughput, on the batched path (`smollm2-batched`) and the deterministic one (`smollm2`,
    under `deterministic_service`)."""
    with tempfile.TemporaryDirectory(prefix="llmrl-bench-gateway-") as tmp:
        workdir = Path(tmp)
        redis, redis_url = start_redis(workdir)
        threads = args.torch_threads or None
        gateway, port, grpc_port = start_gateway(workdir, redis_url, threads)
        figures["torch_threads"] = threads or "default"
        try:
            client = connect(f"127.0.0.1:{grpc_port}")
            figures["cache"] = "redis" if redis_url else "sqlite"
            figures["cache_hit"] = cache_hits(client, port, args.hits)
            print("cache hit latency:", figures["cache_hit"], flush=True)
            steady: dict[str, Any] = {}
            for model, into in ((BATCHED, figures), (DETERMINISTIC, steady)):
                into["score_6_candidates"] = score_latency(client, args.score_repeats, False, model)
                print(f"score (cold prompts, {model}):", into["score_6_candidates"], flush=True)
                into["score_6_candidates_shared_prefix"] = score_latency(
                    client, args.score_repeats, True, model
                )
                print(
                    f"score (shared prefix, {model}):",
                    into["score_6_candidates_shared_prefix"],
                    flush=True,
                )
            batched = concurrency(client, args, BATCHED)
            figures["generation"] = batched["generation"]
            figures["score_throughput"] = batched["score"]
            steady.update(concurrency(client, args, DETERMINISTIC))
            figures["deterministic_service"] = steady
            client.close()
        finally:
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(timeout=60)
            if redis is not None:
                redis.terminate()
                redis.wait(timeout=10)
    hit = figures["cache_hit"]["grpc"]["p50_ms"]  # type: ignore[index]
    best = max(g["ratio_to_sequential"] for g in figures["generation"].values())  # type: ignore[union-attr]
    score_ms = figures["score_6_candidates"]["median_ms"]  # type: ignore[index]
    figures["targets"] = {
        "cache_hit_p50_grpc_le_1ms": hit <= 1.0,
        "throughput_8_clients_ge_3x": figures["generation"].get("clients_8", {}).get(  # type: ignore[union-attr]
            "ratio_to_sequential", best) >= 3.0,
        "score_le_150ms": score_ms <= 150.0,
    }  # fmt: skip


def determinism(figures: dict[str, Any]) -> dict[str, Any]:
    """`deterministic: true` beside the batched path: scoring as a ratio to one forward of
    the prompt (in-process; through the service when it ran) and 8 clients' throughput as a
    ratio to one client's, with their targets (score <= 1.3x, 8 clients >= 4x)."""
    limit = figures["score_limits"]
    ratios, steady = limit["ratio_to_forward"], limit["deterministic"]
    score = {
        "deterministic": {
            "cold": steady["cold"]["ratio_to_forward"],
            "shared_prefix": steady["shared_prefix"]["ratio_to_forward"],
        },
        "batched": {
            "cold": ratios["gateway_cold"],
            "shared_prefix": ratios["gateway_shared_prefix"],
        },
    }
    summary: dict[str, Any] = {"score_ratio_to_forward": score}
    targets: dict[str, Any] = {
        "score_cold_le_1_3x_forward": {k: v["cold"] <= 1.3 for k, v in score.items()},
    }
    service_figures = figures.get("deterministic_service")
    if service_figures:
        forward_ms = limit["median_ms"]["forward"]

        def over_forward(source: dict[str, Any]) -> dict[str, float]:
            return {
                "cold": round(source["score_6_candidates"]["median_ms"] / forward_ms, 2),
                "shared_prefix": round(
                    source["score_6_candidates_shared_prefix"]["median_ms"] / forward_ms, 2
                ),
            }

        def clients_8(generation: dict[str, Any], scoring: dict[str, Any]) -> dict[str, Any]:
            return {
                "generation": generation.get("clients_8", {}).get("ratio_to_sequential"),
                "score": scoring["clients_8"]["ratio_to_sequential"],
            }

        summary["service_score_ratio_to_forward"] = {
            "deterministic": over_forward(service_figures),
            "batched": over_forward(figures),
        }
        concurrent = {
            "deterministic": clients_8(service_figures["generation"], service_figures["score"]),
            "batched": clients_8(figures["generation"], figures["score_throughput"]),
        }
        summary["clients_8_ratio_to_sequential"] = concurrent
        for kind in ("generation", "score"):
            targets[f"clients_8_{kind}_ge_4x_sequential"] = {
                k: v[kind] is not None and v[kind] >= 4.0 for k, v in concurrent.items()
            }
    summary["targets"] = targets
    return summary


if __name__ == "__main__":
    main()
