"""Cache keys are canonical (order-free) and complete (every parameter counts); stores expire
entries; the gateway serves deterministic repeats from the cache for free."""

from __future__ import annotations

import time

import pytest

from llmrl.llm_gateway.api_types import GenerateRequest
from llmrl.llm_gateway.cache import FrontedCache, RedisCache, SqliteCache, cache_key

BASE = {
    "messages": [{"role": "user", "content": "hi"}],
    "prompt": None,
    "n": 1,
    "temperature": 0.0,
    "top_p": 1.0,
    "max_tokens": 16,
    "stop": [],
    "seed": None,
}


def key(op="chat", backend="hf", model="hf:m", adapter="", **changes):
    return cache_key(op, backend, model, adapter, **{**BASE, **changes})


def test_key_ignores_key_order_and_number_spelling():
    reordered = dict(reversed(list(BASE.items())))
    reordered["messages"] = [{"content": "hi", "role": "user"}]
    reordered["temperature"] = 0  # int 0 and float 0.0 mean the same request
    reordered["max_tokens"] = 16.0
    assert cache_key("chat", "hf", "hf:m", "", **reordered) == key()


@pytest.mark.parametrize(
    "changes",
    [
        {"n": 2},
        {"temperature": 0.7},
        {"top_p": 0.9},
        {"max_tokens": 17},
        {"stop": ["\n"]},
        {"seed": 1},
        {"seed": 0},
        {"messages": [{"role": "user", "content": "hi "}]},
        {"messages": [{"role": "system", "content": "hi"}]},
        {"prompt": "hi"},
        {"model": "hf:other"},
        {"adapter": "glam@1"},
        {"adapter": "glam@2"},
        {"backend": "openai"},
        {"op": "completion"},
    ],
)
def test_any_different_parameter_gives_a_different_key(changes):
    assert key(**changes) != key()


def test_sqlite_cache_round_trips_and_expires(tmp_path):
    cache = SqliteCache(tmp_path / "c.sqlite", ttl_s=0.2)
    cache.put("k", {"texts": ["a"], "n": 1})
    assert cache.get("k") == {"texts": ["a"], "n": 1}
    assert cache.get("other") is None
    time.sleep(0.3)
    assert cache.get("k") is None
    cache.close()


def test_redis_cache_round_trips_and_expires(redis_url):
    cache = RedisCache(redis_url, ttl_s=0.2, prefix="test:gateway:")
    cache.put("k", {"texts": ["b"]})
    assert cache.get("k") == {"texts": ["b"]}
    time.sleep(0.35)
    assert cache.get("k") is None
    cache.close()


def chat(gateway, **kwargs):
    fields = {"messages": [{"role": "user", "content": "where is the key?"}], "max_tokens": 6}
    return gateway.generate(GenerateRequest(**{**fields, **kwargs}))


def test_deterministic_repeat_is_a_free_counted_hit(gateway):
    first = chat(gateway, run_id="r", tag="collect")
    second = chat(gateway, run_id="r", tag="collect")
    assert not first.cached and second.cached
    assert second.texts == first.texts and second.cost_usd == 0.0
    usage = gateway.usage("r")
    assert (usage["requests"], usage["cache_hits"], usage["model_calls"]) == (2, 1, 1)
    assert usage["tags"]["collect"]["cache_hits"] == 1
    # a different parameter is a different request
    assert not chat(gateway, run_id="r", max_tokens=7).cached


def test_sampled_requests_skip_the_cache_unless_asked(gateway):
    sampled = {"temperature": 0.9}
    assert not chat(gateway, **sampled).cached
    assert not chat(gateway, **sampled).cached  # not stored: every sample is fresh
    assert not chat(gateway, cache="always", **sampled).cached
    assert chat(gateway, cache="always", **sampled).cached
    seeded = {"temperature": 0.9, "seed": 7}  # a seed makes sampling reproducible: cached
    first = chat(gateway, **seeded)
    again = chat(gateway, **seeded)
    assert again.cached and again.texts == first.texts


def test_bypass_neither_reads_nor_writes(gateway):
    chat(gateway)
    assert not chat(gateway, cache="bypass").cached
    assert chat(gateway).cached


def test_service_mode_shares_answers_through_redis(make_gateway, redis_url):
    settings = {
        "mode": "service",
        "cache": {"backend": "auto", "redis_url": redis_url},
        "ledger": {"backend": "auto", "redis_url": redis_url, "key": "test:shared-ledger"},
    }
    first, second = make_gateway(**settings), make_gateway(**settings)
    assert type(first.cache.store).__name__ == "RedisCache"
    assert not chat(first, max_tokens=3).cached
    assert chat(second, max_tokens=3).cached  # another gateway process would hit it too


def test_in_process_front_respects_the_ttl(tmp_path):
    cache = FrontedCache(SqliteCache(tmp_path / "c.sqlite", ttl_s=0.2), max_entries=2)
    cache.put("a", {"v": 1})
    cache.store.put("a", {"v": "changed underneath"})  # the front answers without a read
    assert cache.get("a") == {"v": 1}
    for key in ("b", "c"):
        cache.put(key, {"v": key})
    assert "a" not in cache._entries and cache.get("a") == {"v": "changed underneath"}
    time.sleep(0.3)
    assert cache.get("b") is None and cache.get("c") is None
