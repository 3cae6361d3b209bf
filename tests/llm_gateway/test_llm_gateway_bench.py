"""bench/llm_gateway.py's in-process limits on the tiny random Llama: one forward of the
prompt, the gateway's scorer, K naive forwards, Lamorel-style scoring and batch decoding each
give positive timings, the scorers agree, and the naive baseline really runs K forwards. No
assertion on how fast anything was."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "llm_gateway.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_llm_gateway", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny(bench: ModuleType, tiny_model_dir: Path) -> tuple:
    return bench.load_local_model(tiny_model_dir, dtype="float32")


def test_the_scorers_agree_and_the_naive_baseline_runs_k_forwards(bench, tiny) -> None:
    model, tokenizer = tiny
    core = bench.gateway_core(model, tokenizer)
    prompt = core.encode(bench.PROMPT_140)
    candidates = [core.encode(c) for c in bench.CANDIDATES]
    counter = bench.ForwardCounter(model)
    try:
        naive = bench.naive_score(model, prompt, candidates)
        assert counter.calls == len(candidates)
        before = counter.calls
        lamorel = bench.lamorel_score(model, prompt, candidates)
        assert counter.calls - before == 2  # the prompt once, the candidates as one batch
        gateway = bench.gateway_score(core, prompt, candidates)
    finally:
        counter.close()
    for a, b, c in zip(naive, lamorel, gateway, strict=True):
        assert math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3)
        assert math.isclose(a, c, rel_tol=1e-3, abs_tol=1e-3)


def test_score_limits_and_batch_limit_give_positive_timings(bench, tiny) -> None:
    model, tokenizer = tiny
    limits = bench.score_limits(model, tokenizer, repeats=2, candidates=bench.CANDIDATES[:3])
    assert limits["candidates"] == 3 and limits["prompt_tokens"] > 100
    assert set(limits["median_ms"]) == {
        "forward", "gateway_cold", "gateway_shared_prefix", "naive", "lamorel"
    }  # fmt: skip
    assert all(ms > 0 for ms in limits["median_ms"].values())
    assert all(ratio > 0 for ratio in limits["ratio_to_forward"].values())
    assert limits["forwards_per_score"]["forward"] == 1
    assert limits["forwards_per_score"]["naive"] == 3  # K separate forwards
    assert limits["forwards_per_score"]["lamorel"] == 2

    batching = bench.batch_limit(model, tokenizer, repeats=2, batch=4, steps=3)
    assert batching["batch_1_tokens_per_s"] > 0 and batching["batch_4_tokens_per_s"] > 0
    assert batching["ratio"] > 0
