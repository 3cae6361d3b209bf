"""A local model computes on a stated thread count in every mode (`stated_thread_count`):
embedded, a policy that trains on one thread in the run's process (When2Ask's, ELLM's) must
not hand that count to the gateway's model, or its scores differ in their last bits from the
same run's under `llmrl up` on CPUs whose kernels split work by thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch
from support.tiny_llm import tiny_gateway_settings

from llmrl.common.threads import stated_thread_count
from llmrl.llm_gateway.client import connect

PROMPT = "You plan for a robot in a grid world. Its task: reach the goal. " * 24


def ask_from_a_thread_on(threads: int, model_dir: Path) -> dict[str, Any]:
    """Score PROMPT through a fresh in-process gateway from a thread that set `threads` torch
    threads first (as a policy's training does), recording the count the model computed on."""
    seen: dict[str, Any] = {}

    def caller() -> None:
        torch.set_num_threads(threads)
        settings = tiny_gateway_settings(model_dir)
        settings["models"]["minilm"] = {
            "backend": "sentence_transformers",
            "path": "builtin:all-minilm-l6-v2",
        }
        client = connect(**settings)
        backend = client.gateway.backend("tiny")
        score = backend.lm.score

        def spied(*args: Any, **kwargs: Any) -> Any:
            seen["model_threads"] = torch.get_num_threads()
            return score(*args, **kwargs)

        backend.lm.score = spied
        answer = client.score(PROMPT, [" explore", " open it"], run_id="threads")
        seen["scores"] = answer.token_logprobs
        seen["caller_threads_after"] = torch.get_num_threads()
        seen["vectors"] = client.embed(["collect wood"], model="minilm", run_id="threads")
        seen["caller_threads_after_embed"] = torch.get_num_threads()

    thread = threading.Thread(target=caller)
    thread.start()
    thread.join()
    return seen


def test_the_model_computes_on_the_stated_count_whatever_its_caller_set(tiny_model_dir):
    stated = stated_thread_count()
    one, own = ask_from_a_thread_on(1, tiny_model_dir), ask_from_a_thread_on(2, tiny_model_dir)
    assert one["model_threads"] == own["model_threads"] == stated
    assert one["scores"] == own["scores"]  # bitwise, on every CPU
    # embeddings compute on the caller's thread, on the stated count, then give its own back
    assert one["caller_threads_after"] == one["caller_threads_after_embed"] == 1
    assert (one["vectors"] == own["vectors"]).all()


def test_the_stated_count_is_the_setting_else_omp_num_threads_else_the_cores(monkeypatch):
    assert stated_thread_count(3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert stated_thread_count() == 5
    monkeypatch.delenv("OMP_NUM_THREADS")
    from llmrl.common.provenance import usable_cores

    assert stated_thread_count() == (usable_cores() or 1)
