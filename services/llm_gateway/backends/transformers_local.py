"""`hf`: a local transformers causal LM (default SmolLM2-135M-Instruct), with LoRA adapters,
dynamic batching of concurrent requests, and scoring that computes each prompt's KV cache once.

Adapters are addressed as `<model>:<adapter>@<version>` (e.g. `smollm2:glam@3`) and found in
the model's `adapters` setting or under `$LLMRL_HOME/adapters/<model>/<adapter>/<version>/`
(a peft `save_pretrained` directory, e.g. one the learner wrote). They are loaded once with
peft into the same base model and switched per batch without reloading the base. Adapters
may also be loaded at runtime under a name of the caller's (vLLM's `/v1/load_lora_adapter`,
`Gateway.load_lora_adapter`): the model thread loads them, as it does every adapter.

This module holds the backend's settings and maps requests in and answers out; the model
itself (`llmrl.llm_gateway.local_causal_lm`, torch) is imported when a model loads.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Hashable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from llmrl.common.devices import Device, device_field, resolve_device
from llmrl.common.names import is_safe_name
from llmrl.common.registry import registry
from llmrl.common.threads import torch_threads
from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.backends.base import Backend, Generation, Scores
from llmrl.llm_gateway.batching import DynamicBatcher
from llmrl.llm_gateway.errors import GatewayTimeoutError, InvalidRequestError, timeout_advice
from llmrl.llm_gateway.local_models import resolve_path
from llmrl.llm_gateway.settings import GatewaySettings, ModelConfig

CANCEL_POLL_S = 0.05  # how often a waiting caller checks whether its request was abandoned
LORA_KIND = "lora"  # the batcher's jobs that load or unload a runtime adapter


class HfModelConfig(ModelConfig):
    """A local transformers model's settings (`backend: hf`)."""

    backend: Literal["hf"] = "hf"
    # a local model has no network to hang on: its requests wait only for the model itself,
    # whose queue on a busy CPU (a test run beside five envs' plans, one row at a time when
    # deterministic) passed the remote default of 60 s in `make demo`
    timeout_s: float = Field(300.0, gt=0)
    path: str | None = Field(
        None, description="a local model directory or a builtin:... name (local_models.py)"
    )
    # auto: the process's precision ($LLMRL_PRECISION, `llmrl.common.numerics`): float32 on
    # every machine unless set, so a run's numerics never follow the CPU silently
    dtype: Literal["auto", "bfloat16", "float32", "float16"] = "auto"
    device: Device = device_field("runs")
    max_batch_size: int = Field(8, ge=1)
    max_wait_ms: float = Field(5.0, ge=0)
    max_context_tokens: int = Field(4096, ge=16)
    # scoring: candidate rows x (prompt + candidate) tokens per forward pass (bounds memory;
    # a cancelled score stops between passes)
    score_chunk_tokens: int = Field(32_768, ge=16)
    score_forward_tokens: int | None = Field(
        None,
        ge=16,
        description=(
            "scoring: the most tokens one forward pass computes (rows x columns; a long "
            "prompt or candidate runs in segments on its KV cache). A cancelled or timed-out "
            "score stops after the forward in progress, so this bounds how long it holds the "
            "model. None: 512 on a CPU (SmolLM2-135M: about a second on 2 idle cores), "
            "8192 on a GPU"
        ),
    )
    deterministic: bool = Field(
        True,
        description=(
            "every request computed in forward passes shaped by it alone (a score's prompt "
            "at batch 1 in segments at fixed offsets from its start, its candidates packed "
            "into the pass of the prompt's last segment, or batched together on the prompt's "
            "KV cache when they do not fit; each generated row at batch 1), so that its "
            "log-probs and tokens are bitwise the same alone or in any batch the gateway "
            "forms, and a run repeats at its seed. The batcher still groups concurrent "
            "requests, but their rows no longer share passes, and the prefix cache reuses "
            "only whole segments of score_forward_tokens. false: rows of concurrent requests "
            "share passes (far more generation throughput with many clients; the last bits "
            "of a row depend on what shares its batch)"
        ),
    )
    adapters: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="LoRA adapters: name -> version -> directory (peft save_pretrained output)",
    )

    @field_validator("adapters")
    @classmethod
    def _plain_adapter_names(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for adapter, versions in value.items():  # requests reach only safe names
            for part in (adapter, *versions):
                if not is_safe_name(part):
                    raise ValueError(
                        f"{part!r} is not a plain name (letters, digits, '_', '.', '-'; never '..')"
                    )
        return value

    def source(self, name: str) -> str:
        return self.path or ""


@registry.register_backend(
    "hf",
    description="Local transformers causal LM (LoRA, batching)",
    requires=("torch", "transformers", "peft"),
    extra="llm",
)
class TransformersBackend(Backend):
    """A local Hugging Face causal LM; concurrent requests are batched by one model thread."""

    settings_model = HfModelConfig

    ops = frozenset({"chat", "completion", "score"})
    guided_decoding = True

    config: HfModelConfig

    def __init__(self, name: str, config: HfModelConfig, settings: GatewaySettings) -> None:
        super().__init__(name, config, settings)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from llmrl.llm_gateway.local_causal_lm import (
            Adapters,
            LocalCausalLM,
            default_forward_tokens,
            resolve_dtype,
        )

        if not config.path:
            raise InvalidRequestError(f"models.{name}.path: the hf backend needs a path", "path")
        path = resolve_path(config.path)
        try:
            device = resolve_device(config.device, f"models.{name}.device")
        except ValueError as exc:
            raise InvalidRequestError(str(exc), "device") from None
        tokenizer = AutoTokenizer.from_pretrained(path)
        dtype = resolve_dtype(config.dtype, device)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        forward_tokens = config.score_forward_tokens or default_forward_tokens(device)
        self.lm = LocalCausalLM(
            model, tokenizer, config.score_chunk_tokens, forward_tokens, config.deterministic
        )
        self.adapters = Adapters(model, name, config.adapters)
        self.batcher = DynamicBatcher(
            self._run_group, config.max_batch_size, config.max_wait_ms / 1000, f"hf-{name}"
        )

    # -- requests in -------------------------------------------------------------------------
    def _prompt_ids(self, request: GenerateRequest | ScoreRequest) -> list[int]:
        if isinstance(request, GenerateRequest):
            text = request.prompt if request.messages is None else None
            field_name = "prompt" if text is not None else "messages"
            if text is None:
                text = self.lm.chat_prompt(request.messages or [])
        else:
            field_name = "prompt"
            prompt = request.prompt
            text = prompt if isinstance(prompt, str) else self.lm.chat_prompt(prompt)
        ids = self.lm.encode(text)
        if not ids:
            raise InvalidRequestError(f"{field_name} encodes to no tokens", field_name)
        return ids

    def prompt_tokens(self, request: GenerateRequest | ScoreRequest) -> int:
        count = len(self._prompt_ids(request))
        if isinstance(request, ScoreRequest):
            count += sum(len(self.lm.encode(c)) for c in request.candidates)
        return count

    def count_tokens(self, text: str) -> int:
        return len(self.lm.encode(text))

    def score_shape(self, request: ScoreRequest) -> tuple[int, int]:
        longest = max(len(ids) for ids in self.lm.encode_batch(list(request.candidates)))
        return len(self._prompt_ids(request)), longest

    def _check_context(self, tokens: int, field_name: str) -> None:
        limit = self.config.max_context_tokens
        if tokens > limit:
            raise InvalidRequestError(
                f"{field_name}: the request needs {tokens} tokens but model {self.name!r} "
                f"allows {limit} (prompt + max_tokens, or prompt + longest candidate)",
                field_name,
            )

    def generate(self, request: GenerateRequest, adapter: str, timeout_s: float) -> Generation:
        prompt_ids = self._prompt_ids(request)
        self._check_context(len(prompt_ids) + request.max_tokens, "max_tokens")
        if adapter:
            self.adapters.path(adapter)  # unknown adapters fail here, not in the model thread
        from llmrl.llm_gateway.local_causal_lm import GenGroup, GenJob

        stops = tuple(sorted(request.stop or ()))
        group = GenGroup(adapter, stops)
        if request.temperature > 0:
            job = GenJob(
                prompt_ids, request.n, request.max_tokens, request.stop, request.guided_lines,
                request.temperature, request.top_p, request.seed, request.abandoned,
            )  # fmt: skip
            return self._wait(self.batcher.submit("generate", group, job), timeout_s, job.abandoned)
        # greedy: the n answers are identical, so compute one and repeat it
        job = GenJob(
            prompt_ids, 1, request.max_tokens, request.stop, request.guided_lines,
            abandoned=request.abandoned,
        )  # fmt: skip
        one = self._wait(self.batcher.submit("generate", group, job), timeout_s, job.abandoned)
        n = request.n
        return Generation(
            one.texts * n, one.prompt_tokens, one.completion_tokens * n, one.finish_reasons * n
        )

    def score(self, request: ScoreRequest, adapter: str, timeout_s: float) -> Scores:
        from llmrl.llm_gateway.local_causal_lm import ScoreJob

        prompt_ids = self._prompt_ids(request)
        candidate_ids = []
        for i, candidate in enumerate(request.candidates):
            ids = self.lm.encode(candidate)
            if not ids:
                raise InvalidRequestError(
                    f"candidates[{i}] encodes to no tokens", f"candidates[{i}]"
                )
            candidate_ids.append(ids)
        self._check_context(len(prompt_ids) + max(map(len, candidate_ids)), "candidates")
        if adapter:
            self.adapters.path(adapter)
        job = ScoreJob(prompt_ids, candidate_ids, request.abandoned)
        token_logprobs = self._wait(
            self.batcher.submit("score", (adapter,), job), timeout_s, job.abandoned
        )
        return Scores(token_logprobs, len(prompt_ids))

    def _wait(self, future: Any, timeout_s: float, abandoned: threading.Event) -> Any:
        """The job's result. When it times out or its caller leaves (`abandoned` is set by the
        REST or gRPC layer), a queued job is dropped from the queue and a running one stops
        at its next decoding step or scoring forward pass, so it cannot hold the model."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or abandoned.is_set():
                left = abandoned.is_set()
                future.cancel()
                abandoned.set()
                raise GatewayTimeoutError(
                    f"model {self.name!r}: the request was cancelled (its caller left)"
                    if left
                    else f"model {self.name!r} did not answer within {timeout_s:g} s"
                    + timeout_advice(self.name),
                    "timeout_s",
                )
            try:
                result = future.result(timeout=min(remaining, CANCEL_POLL_S))
                break
            except FutureTimeout:
                continue
        if self.lm.closing.is_set() or abandoned.is_set():
            # cut short: an answer that must never be cached (the job may finish its last
            # chunk or step before this loop sees that its caller left)
            raise GatewayTimeoutError(
                f"model {self.name!r}: the request was cancelled (its caller left)"
                if abandoned.is_set()
                else f"model {self.name!r} stopped before the answer was complete (the "
                "gateway is shutting down)",
                "timeout_s",
            )
        return result

    # -- adapters loaded at runtime (vLLM's /v1/load_lora_adapter) -------------------------
    def load_runtime_adapter(self, lora_name: str, path: Path, timeout_s: float) -> str:
        """Load the LoRA adapter in folder `path` (already checked: `Gateway.load_lora_adapter`)
        under `lora_name`, on the model thread; returns its adapter key."""
        from llmrl.common.trusted import digest
        from llmrl.llm_gateway.local_causal_lm import Adapters
        from llmrl.llm_gateway.runtime_adapters import SAFETENSORS_FILE

        content = digest(path / "adapter_config.json") + digest(path / SAFETENSORS_FILE)
        key = Adapters.runtime_key(lora_name, hashlib.sha256(content.encode()).hexdigest())
        self._on_model_thread(("load", key), path, timeout_s)
        return key

    def unload_runtime_adapter(self, key: str, timeout_s: float) -> None:
        self._on_model_thread(("unload", key), None, timeout_s)

    def _on_model_thread(self, group: tuple[str, str], path: Path | None, timeout_s: float) -> None:
        try:
            self.batcher.submit(LORA_KIND, group, path).result(timeout=timeout_s)
        except FutureTimeout:
            raise GatewayTimeoutError(
                f"model {self.name!r}: the adapter did not {group[0]} within {timeout_s:g} s "
                "(it still may, once the model thread is free)",
                "timeout_s",
            ) from None

    # -- the model thread ----------------------------------------------------------------
    def _run_group(self, kind: str, group: Hashable, jobs: list[Any]) -> list[Any]:
        if kind == LORA_KIND:
            action, key = group  # type: ignore[misc]
            for path in jobs:
                if action == "load":
                    self.adapters.load_runtime(key, path)
                else:
                    self.adapters.unload_runtime(key)
            return [None] * len(jobs)
        adapter = group[0]  # type: ignore[index]
        self.adapters.ensure_loaded(adapter)
        with self.adapters.active(adapter), torch_threads(self.threads):
            if kind == "score":
                return self.lm.score(jobs, cache_key=adapter)
            return self.lm.generate(jobs, group.stops)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.lm.closing.set()  # a generation in progress stops now, so shutdown is prompt
        self.batcher.close()
