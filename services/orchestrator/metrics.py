"""Prometheus metrics of the orchestrator and rollout workers (names `llmrl_...`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RUNS = Counter("llmrl_runs_total", "Runs that reached a final state", ["recipe", "status"])
RUNS_ACTIVE = Gauge("llmrl_runs_active", "Runs currently executing in this orchestrator")
EPISODES_STORED = Counter(
    "llmrl_episodes_stored_total", "Episode records stored (duplicates excluded)", ["recipe"]
)
EPISODES_DUPLICATE = Counter(
    "llmrl_episodes_duplicate_total", "Episode results delivered again and ignored"
)
EPISODE_LLM_CALLS = Counter(
    "llmrl_episode_llm_calls_total", "LLM calls made inside stored episodes", ["cached"]
)
EPISODE_LLM_TOKENS = Counter("llmrl_episode_llm_tokens_total", "LLM tokens of stored episodes")
EPISODE_LLM_COST = Counter("llmrl_episode_llm_cost_usd_total", "LLM spend of stored episodes")
QUEUE_BACKLOG = Gauge("llmrl_queue_backlog", "Episode jobs not yet acknowledged")
WORKER_JOBS = Counter("llmrl_worker_jobs_total", "Episode jobs handled by workers", ["outcome"])
EPISODE_SECONDS = Histogram(
    "llmrl_episode_seconds",
    "Wall time of one episode on a worker",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
