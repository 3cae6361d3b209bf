"""Prometheus metrics of one gateway (its own registry, so several gateways can live in one
process, e.g. in tests). Labels never carry secrets nor caller-chosen ids (run or key ids):
only op, backend, configured model, cache outcome and error kind, so the series stay bounded."""

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
    """Reads the ledger at scrape time: how many runs have a budget and how many have spent it.
    Never a series per run: run ids are chosen by callers, so per-run figures would grow
    /metrics without bound; they live in the usage API (`GET /v1/usage/{run}`)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def collect(self):
        budgets = self.ledger.budgets().values()
        yield GaugeMetricFamily(
            "llmrl_gateway_budgeted_runs", "Runs with a budget", value=len(budgets)
        )
        yield GaugeMetricFamily(
            "llmrl_gateway_budgets_exhausted",
            "Budgeted runs with no USD or no calls left",
            value=sum(
                1
                for usd_left, calls_left in budgets
                if (usd_left is not None and usd_left <= 0)
                or (calls_left is not None and calls_left <= 0)
            ),
        )


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
        self.rejected = Counter(
            "llmrl_gateway_rejected_requests",
            "Requests refused by a per-tenant or per-route limit before any model work, by "
            "reason (concurrency, tokens_per_minute, body_size) and caller (key, service)",
            ["reason", "caller"],
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
