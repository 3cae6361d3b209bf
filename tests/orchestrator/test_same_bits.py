"""Same seed, same bits: a run gives byte-identical rows embedded, with `--jobs 2`, and through
`llmrl up` (two rollout workers), whatever its LLM calls shared a batch with.

Each case is a recipe's own quick file (`services/recipes/<recipe>/experiments/quick.yaml`) with
overrides that shrink it to a test's size and name the tiny model, so the test follows the file.
`bench/same_bits.py` runs the three modes, each in its own LLMRL_HOME (`llmrl up` with a real
Redis and real services), and compares each run's rows and curves and every LLM answer of it
(the gateway's call log beside its ledger: SQLite embedded, Redis as a service): rows of
argmax choices could hide a last-bit difference, the answers cannot. The LLM is the tiny random
Llama served by the gateway's local backend (float32, its `deterministic` scoring), with the
cache off so every call is computed again in each mode."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.processes import REPO, child_env
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

BENCH = REPO / "bench" / "same_bits.py"
SEEDS = (0, 1)


@dataclass(frozen=True)
class Case:
    """A recipe's quick file and the overrides that make it a test's size."""

    recipe: str  # its folder under services/recipes
    overrides: tuple[str, ...]
    needs: str | None = None  # a fixture that skips the case without its data

    def arguments(self) -> list[str]:
        quick = REPO / "services" / "recipes" / self.recipe / "experiments" / "quick.yaml"
        seeds = f"seeds=[{','.join(map(str, SEEDS))}]"
        return [str(quick), *self.overrides, seeds]


# When2Ask with the local LLM planner (the gateway scores the feasible skills), 4 envs at once
# so that their planner queries meet in the gateway's batches
WHEN2ASK = Case(
    "when2ask",
    (
        "envs=[[SimpleDoorKey]]",
        "planner=local",
        "train_steps=256",
        "never_ask_steps=0",
        "n_envs=4",
        "n_steps=64",
        "eval_episodes=4",
        "max_steps=40",
        "methods=[[always,learned]]",
    ),
)
# ELLM with the LLM suggester (the tiny model ranks the goals by log-likelihood) in 2 envs at
# once, so that their suggestion queries meet in the gateway's batches; MiniLM (the gateway's
# default embedding model) pays the suggestions. Short episodes, so evaluations end.
ELLM = Case(
    "ellm",
    (
        f"model={TINY_MODEL}",
        "methods=[[ellm]]",
        "suggester=llm-score",
        "num_envs=2",
        "env_kwargs.length=40",
        "pretrain_frames=160",
        "learning_starts=40",
        "buffer_size=160",
        "checkpoint_every=80",
        "eval_episodes=2",
        "finetune_frames=0",
    ),
)
# GLAM's LLM-PPO with LoRA on the tiny model: one PPO update of 2 envs x 8 steps, then 2
# held-out episodes with sampled actions (embedded: in the run's process; as services: the
# learner trains, a rollout worker evaluates through its gateway)
GLAM = Case(
    "glam",
    (
        f"model={TINY_MODEL}",
        "methods=[[glam]]",
        "train_steps=16",
        "ppo.num_envs=2",
        "ppo.num_steps=8",
        "ppo.minibatch_size=8",
        "ppo.update_epochs=1",
        "eval_every=1",
        "eval_episodes=2",
    ),
)
# KALM: grounding SFT of the tiny model on scripted episodes, imagined rollouts, BC on real
# and real + imagined data, at a few steps each
KALM = Case(
    "kalm",
    (
        f"model={TINY_MODEL}",
        "scripted_episodes=20",
        "grounding_layers=2",
        "grounding_steps=4",
        "grounding_batch_size=4",
        "imagined_per_level=4",
        "imagine_max_steps=3",
        "algorithms=[[bc]]",
        "offline_steps=30",
        "eval_episodes=2",
    ),
)
# LLM-Personalize on the real Housekeep data (skipped without it, saying how to get it):
# zero-shot, bootstrap SFT and one self-training round (sampled collection at temperature 1)
# of the tiny model, one short episode each (passed on 2026-12-05 with the data, 140 s).
LLM_PERSONALIZE = Case(
    "llm_personalize",
    (
        f"model={TINY_MODEL}",
        "train_episodes=1",
        "max_steps=4",
        "rounds=1",
        "collect_samples=1",
        "replay_bootstrap_examples=2",
        "sft_steps=2",
        "lora_layers=2",
    ),
    needs="data_dir",
)
# KALM's case once failed in 1 of 3 full runs (2026-12-05): its seed-0 run in the `data` phase
# under `llmrl up`, with no error text in the sweep. `llmrl up` starts every service at once and
# the bench submits once the orchestrator is healthy; KALM's data phase asks the gateway for
# embeddings seconds later, and a gateway still starting refused the connection (UNAVAILABLE).
# The gateway's gRPC client now waits for it (LLMRL_LLM_GATEWAY_RETRY_S), and a sweep following
# an experiment prints each failed run's phase and error. ELLM's case then failed once (CI,
# 2026-12-07) the same way at the simulator: both runs' pretraining found no simulator
# listening (UNAVAILABLE); creating a world now waits for it too (LLMRL_SIMULATOR_RETRY_S).
CASES = (WHEN2ASK, ELLM, GLAM, KALM, LLM_PERSONALIZE)


def same_bits(case: Case, model_dir: Path, folder: Path) -> dict[str, Any]:
    """bench/same_bits.py on `case` with the tiny model (no cache): its report."""
    config = folder / "gateway.yaml"
    config.write_text(yaml.safe_dump(tiny_gateway_settings(model_dir, cache="none")))
    done = subprocess.run(
        [sys.executable, str(BENCH), *case.arguments(), "--gateway-config", str(config),
         "--work", str(folder / "work")],
        env=child_env(), cwd=REPO, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == (0 if report["same_bits"] else 1), done.stderr[-3000:]
    return report


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three sweeps of two runs each and an `llmrl up` on 2 busy cores
@pytest.mark.parametrize("case", CASES, ids=[case.recipe for case in CASES])
def test_a_quick_file_gives_the_same_bits_embedded_with_jobs_and_as_services(
    case: Case, tiny_model_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
):
    if case.needs:
        request.getfixturevalue(case.needs)
    report = same_bits(case, tiny_model_dir, tmp_path)
    assert len(report["runs"]) == len(SEEDS)
    assert all(report["calls"].values()), f"a run asked the LLM nothing: {report['calls']}"
    # the seeds play different games: not a constant
    assert len(set(report["runs"].values())) == len(SEEDS)
    for mode in ("jobs2", "up"):
        found = report["modes"][mode]
        assert found == {"rows_differ": [], "calls_differ": {}, "same_bits": True}, mode
    assert report["same_bits"]


def bench_module() -> Any:
    """bench/same_bits.py as a module (bench/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("same_bits_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_names_a_run_whose_rows_or_answers_differ():
    """The comparison can fail: a last-bit difference in one answer, a call asked in one mode
    only, other rows, other runs (what `deterministic: false` gives under `llmrl up`)."""
    bench = bench_module()
    config = {"seed": 0}
    calls = {"score a": "[-1.0]", "score b": "[-2.0]"}
    reference = {"0": bench.outcome(config, {"rows": [{"success": 1.0}]}, calls)}
    label = reference["0"]["label"]
    same = {"0": bench.outcome(config, {"rows": [{"success": 1.0}], "timings": 9}, dict(calls))}
    assert bench.differences(reference, same) == {"rows_differ": [], "calls_differ": {}}
    last_bit = {**calls, "score b": "[-2.0000002]"}
    other = {"0": bench.outcome(config, {"rows": [{"success": 0.5}]}, last_bit)}
    assert bench.differences(reference, other) == {
        "rows_differ": [label],
        "calls_differ": {label: {"asked_otherwise": 0, "answered_otherwise": 1}},
    }
    asked = {"0": bench.outcome(config, {"rows": [{"success": 1.0}]}, {"score a": "[-1.0]"})}
    assert bench.differences(reference, asked)["calls_differ"] == {
        label: {"asked_otherwise": 1, "answered_otherwise": 0}
    }
    assert bench.differences(reference, {})["runs"]


def test_the_check_matches_calls_by_request_with_the_run_id_masked(tmp_path: Path):
    """GLAM asks its adapter, named after the run: the same call under two run ids is one."""
    from llmrl.llm_gateway.ledger_store import SqliteLedgerStore

    bench = bench_module()
    store = SqliteLedgerStore(tmp_path / "ledger.sqlite")
    try:
        for run_id in ("glam-quick-abc-s0", "glam-quick-20261205-abc-s0"):
            request = {"adapter": f"{run_id}@1", "op": "score", "params": {"prompt": "go"}}
            answer = {"token_logprobs": [[-1.5]]}
            record = {"key": run_id, "sampled": False, "request": request, "answer": answer}
            store.save_calls([(run_id, record)], {})
        first = bench.answers(store, "glam-quick-abc-s0")
        assert first == bench.answers(store, "glam-quick-20261205-abc-s0")
        assert "<run>@1" in next(iter(first))
    finally:
        store.close()
