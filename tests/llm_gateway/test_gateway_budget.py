"""Budgets in calls and USD hold under 50 concurrent requests; the ledger adds up."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from llmrl.llm_gateway.api_types import GenerateRequest
from llmrl.llm_gateway.errors import BudgetExceededError, InvalidRequestError
from llmrl.llm_gateway.ledger import Ledger


def fire(gateway, count: int, run_id: str, max_tokens: int = 4) -> tuple[list, list]:
    """`count` concurrent distinct requests; returns (results, budget errors)."""

    def one(i: int):
        request = GenerateRequest(
            messages=[{"role": "user", "content": f"request {i}"}],
            max_tokens=max_tokens,
            run_id=run_id,
            tag=f"phase{i % 2}",
        )
        try:
            return gateway.generate(request)
        except BudgetExceededError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=count) as pool:
        outcomes = list(pool.map(one, range(count)))
    results = [o for o in outcomes if not isinstance(o, Exception)]
    errors = [o for o in outcomes if isinstance(o, BudgetExceededError)]
    assert len(results) + len(errors) == count
    return results, errors


def test_fifty_concurrent_requests_never_overshoot_a_calls_budget(gateway):
    gateway.set_budget("calls-run", calls=10)
    results, errors = fire(gateway, 50, "calls-run")
    assert len(results) == 10 and len(errors) == 40
    assert "calls budget of 10" in str(errors[0]) and errors[0].field == "calls"
    usage = gateway.usage("calls-run")
    assert usage["model_calls"] == 10 and usage["errors"] == 40
    assert usage["budget"]["calls_remaining"] == 0
    assert usage["tags"]["phase0"]["model_calls"] + usage["tags"]["phase1"]["model_calls"] == 10


def test_fifty_concurrent_requests_never_overshoot_a_usd_budget(make_gateway):
    # a "paid" local model: $1000 per million tokens either way
    gateway = make_gateway(
        models={"tiny": {"prompt_usd_per_1m": 1000.0, "completion_usd_per_1m": 1000.0}}
    )
    budget = 0.5
    gateway.set_budget("usd-run", usd=budget)
    results, errors = fire(gateway, 50, "usd-run", max_tokens=8)
    usage = gateway.usage("usd-run")
    spent = sum(r.cost_usd for r in results)
    assert results and errors  # the budget allowed some requests and refused others
    assert usage["cost_usd"] == pytest.approx(spent)
    assert spent <= budget
    assert usage["budget"]["usd_remaining"] == pytest.approx(budget - spent)
    expected = sum(r.prompt_tokens + r.completion_tokens for r in results) * 1000.0 / 1e6
    assert spent == pytest.approx(expected)
    assert "budget exceeded for run 'usd-run'" in str(errors[0])


def test_cache_hits_are_served_after_the_budget_is_spent(gateway):
    request = {"messages": [{"role": "user", "content": "same"}], "max_tokens": 3, "run_id": "h"}
    gateway.set_budget("h", calls=1)
    first = gateway.generate(GenerateRequest(**request))
    again = gateway.generate(GenerateRequest(**request))
    assert again.cached and again.texts == first.texts
    with pytest.raises(BudgetExceededError):
        gateway.generate(GenerateRequest(**{**request, "max_tokens": 4}))


def test_reservations_are_released_when_calls_fail():
    ledger = Ledger()
    ledger.set_budget("r", usd=1.0, calls=2)
    held = ledger.reserve("r", 0.6)
    with pytest.raises(BudgetExceededError, match=r"only \$0\.400000"):
        ledger.reserve("r", 0.6)
    ledger.release(held)
    settled = ledger.reserve("r", 0.6)
    ledger.record("r", "t", cached=False, cost_usd=0.25, reservation=settled)
    assert ledger.usage("r")["budget"]["usd_remaining"] == pytest.approx(0.75)
    assert ledger.usage("r")["budget"]["calls_remaining"] == 1


@pytest.mark.parametrize(("usd", "calls", "field"), [(-1, None, "usd"), (None, -3, "calls")])
def test_bad_budgets_are_refused_with_the_field(gateway, usd, calls, field):
    with pytest.raises(InvalidRequestError) as caught:
        gateway.set_budget("r", usd=usd, calls=calls)
    assert caught.value.field == field


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_totals_and_budgets_survive_a_restart(make_gateway, redis_url, store):
    ledger = {"backend": store, "redis_url": redis_url, "key": "test:restart-ledger"}
    request = {"max_tokens": 2, "run_id": "resumed", "tag": "train", "cache": "bypass"}
    first = make_gateway(ledger=ledger)
    first.set_budget("resumed", calls=2)
    first.generate(GenerateRequest(messages=[{"role": "user", "content": "a"}], **request))
    first.close()  # a restart: what was spent and the budget come back
    second = make_gateway(ledger=ledger)
    usage = second.usage("resumed")
    assert usage["model_calls"] == 1 and usage["tags"]["train"]["model_calls"] == 1
    assert usage["budget"] == {"usd": None, "calls": 2, "usd_remaining": None, "calls_remaining": 1}
    second.generate(GenerateRequest(messages=[{"role": "user", "content": "b"}], **request))
    with pytest.raises(BudgetExceededError):
        second.generate(GenerateRequest(messages=[{"role": "user", "content": "c"}], **request))
