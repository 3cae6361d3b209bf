"""bench/gateway_peers.py's own pieces, end to end with tiny counts and without LiteLLM: the
stand-in upstream, the gateway as a service (`llmrl serve llm_gateway`, auth on) routing to
it, both clients (the official `openai` one over REST, the gateway's over gRPC), and the JSON
report's last line. No assertion on how fast anything was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "gateway_peers.py"


def test_the_peers_bench_measures_the_floor_and_the_gateway_and_reads_its_ledger() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--skip-litellm", "--requests", "20", "--concurrency", "4",
         "--rounds", "1", "--warmup", "3", "--skip-score"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])

    assert set(report["targets"]) == {"floor", "gateway", "gateway_grpc"}
    assert "hit" not in report["targets"]["floor"]  # the upstream has no cache
    for name, paths in (("floor", ("miss",)), ("gateway", ("miss", "hit")),
                        ("gateway_grpc", ("miss", "hit"))):  # fmt: skip
        for path in paths:
            figures = report["targets"][name][path]
            sequential = figures["sequential"]
            assert sequential["n"] == 20 and figures["errors"] == 0, (name, path, figures)
            assert 0 < sequential["p50_ms"] <= sequential["p90_ms"] <= sequential["p99_ms"]
            assert figures["concurrent"]["requests_per_s"] > 0
            assert figures["requests"] == 40  # 20 sequential, then 20 from 4 clients
            # a miss reaches the upstream once; a hit never does
            assert figures["upstream_calls"] == (40 if path == "miss" else 0), (name, path)

    # the gateway's ledger counted every request, and priced every miss
    for name in ("gateway", "gateway_grpc"):
        usage = report["usage"][name]
        assert usage["recorded"] is True, usage
        assert usage["requests"] == usage["sent"] > 0
        assert usage["cache_hits"] == 40 and usage["model_calls"] == usage["sent"] - 40
        assert usage["cost_usd"] > 0

    # the gateway's log holds no line per upstream call (the HTTP client's INFO lines are off)
    assert report["gateway_log_lines"] < report["usage"]["gateway"]["model_calls"]

    assert report["added_p50_ms"].keys() == {"gateway", "gateway_grpc"}
    assert report["throughput_fraction_of_floor"]["gateway"] > 0
    assert set(report["goals"]) >= {"miss_added_p50_le_2ms", "hit_p50_grpc_le_0_5ms"}
    # the gateway's CPU per miss on each door, and the whole machine's per target's request
    assert report["gateway_cpu_ms_per_miss"].keys() == {"gateway", "gateway_grpc"}
    assert report["machine_cpu_ms_per_miss"].keys() == {"floor", "gateway", "gateway_grpc"}
    assert report["cpu_bound_fraction_of_floor"].keys() == {"gateway", "gateway_grpc"}
    assert report["machine"]["cpus"] >= 1 and "cpu_model" in report["machine"]
    assert len(report["load"]["start"]) == 3 and report["versions"]["litellm"] is None
    assert "upstream (floor)" in completed.stdout and "gateway gRPC" in completed.stdout
    assert report["score_through_gateway"] is None  # --skip-score


def test_the_peers_bench_scores_through_another_gateway(tiny_model_dir: Path) -> None:
    """--score-only: a back gateway serving the tiny model, a front one scoring through it
    (token ids and text): every path answers, the front's scores are the back's."""
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--score-only", "--score-requests", "2", "--score-rounds",
         "1", "--score-model", str(tiny_model_dir)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    score = json.loads(completed.stdout.strip().splitlines()[-1])["score_through_gateway"]
    assert "error" not in score, score
    assert set(score["paths"]) == {"local", "engine_token_ids", "engine_text"}
    for figures in score["paths"].values():
        assert figures["n"] == 2 and figures["p50_ms"] > 0
        assert figures["cpu_ms_per_request"]["back"] > 0
    assert set(score["added_p50_ms"]) == {"engine_token_ids", "engine_text"}
    assert all(gap < 1e-4 for gap in score["max_abs_logprob_difference"].values()), score
    assert "score through a gateway" in completed.stdout
