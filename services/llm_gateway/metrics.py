"""Prometheus metrics of one gateway (its own registry, so several gateways can live in one
process, e.g. in tests). Labels never carry secrets: only op, backend, model, cache outcome,
error kind and run id."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from llmrl.llm_gateway.ledger import Ledger

disable_created_metrics()  # the *_created series only add noise to dashboards

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class _BudgetCollector:
    """Reads the ledger at scrape time: remaining USD and calls of every budgeted run."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def collect(self):
        usd = GaugeMetricFamily(
            "llmrl_gateway_budget_remaining_usd", "USD left in a run's budget", labels=["run_id"]
        )
        calls = GaugeMetricFamily(
            "llmrl_gateway_budget_remaining_calls",
            "Model calls left in a run's budget",
            labels=["run_id"],
        )
        for run_id, (usd_left, calls_left) in self.ledger.budgets().items():
            if usd_left is not None:
                usd.add_metric([run_id], usd_left)
            if calls_left is not None:
                calls.add_metric([run_id], calls_left)
        yield usd
        yield calls


class GatewayMetrics:
    def __init__(self, ledger: Ledger) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "llmrl_gateway_requests",
            "Answered requests by operation, backend, model and cache outcome (hit/miss/bypass)",
            ["op", "backend", "model", "cache"],
            registry=self.registry,
        )
        self.errors = Counter(
            "llmrl_gateway_errors",
            "Failed requests by operation and error kind",
            ["op", "kind"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "llmrl_gateway_tokens",
            "Tokens processed by models (cache hits excluded), by kind prompt/completion",
            ["backend", "model", "kind"],
            registry=self.registry,
        )
        self.cost = Counter(
            "llmrl_gateway_cost_usd",
            "USD spent on model calls",
            ["backend", "model"],
            registry=self.registry,
        )
        self.retries = Counter(
            "llmrl_gateway_retries",
            "Retries of remote calls, by model and reason",
            ["model", "reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "llmrl_gateway_request_latency_seconds",
            "Latency of answered requests inside the gateway",
            ["op", "backend", "model", "cache"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "llmrl_gateway_batch_size",
            "Requests coalesced into one forward pass of a local model",
            ["model", "kind"],
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=self.registry,
        )
        self.registry.register(_BudgetCollector(ledger))

    def render(self) -> bytes:
        return generate_latest(self.registry)
