"""`hf`: a local transformers causal LM (default SmolLM2-135M-Instruct), with LoRA adapters,
dynamic batching of concurrent requests, and scoring that computes each prompt's KV cache once.

Adapters are addressed as `<model>:<adapter>@<version>` (e.g. `smollm2:glam@3`) and found in
the model's `adapters` setting or under `$LLMRL_HOME/adapters/<model>/<adapter>/<version>/`
(a peft `save_pretrained` directory, e.g. one the learner wrote). They are loaded once with
peft into the same base model and switched per batch without reloading the base.
"""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Hashable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from llmrl.common.config import home_dir
from llmrl.common.devices import native_bf16, resolve_device
from llmrl.common.registry import registry
from llmrl.common.token_batches import pad
from llmrl.llm_gateway.api_types import GenerateRequest, GuidedLines, ScoreRequest
from llmrl.llm_gateway.backends.base import Backend, Generation, Scores
from llmrl.llm_gateway.batching import DynamicBatcher
from llmrl.llm_gateway.errors import GatewayTimeoutError, InvalidRequestError
from llmrl.llm_gateway.guided import GuidedLinesProcessor, LineAutomaton
from llmrl.llm_gateway.local_models import resolve_path
from llmrl.llm_gateway.names import check_adapter
from llmrl.llm_gateway.sampling import RowSampler, RowSampling
from llmrl.llm_gateway.settings import GatewaySettings, ModelConfig

CANCEL_POLL_S = 0.05  # how often a waiting caller checks whether its request was abandoned
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def default_forward_tokens(device: torch.device) -> int:
    """Tokens per scoring forward pass when the model's settings name none: about a second's
    work on a small CPU (what a cancelled score may still cost), far more on a GPU."""
    return 512 if device.type == "cpu" else 8192


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if native_bf16(device) else torch.float32
    return DTYPES[name]


@dataclass
class _GenJob:
    prompt_ids: list[int]
    n: int
    max_tokens: int
    stop: list[str] | None
    guided: GuidedLines | None = None
    temperature: float = 0.0  # sampling is per row (`RowSampler`): any mix shares a batch
    top_p: float = 1.0
    seed: int | None = None
    # set when its caller stopped waiting (timeout): its rows stop at the next decoding step
    abandoned: threading.Event = field(default_factory=threading.Event, compare=False)


class _GenGroup(NamedTuple):
    """What generate requests must share to run in one batch."""

    adapter: str
    stops: tuple[str, ...]  # rows of a batch stop early on the same strings


@dataclass
class _ScoreJob:
    prompt_ids: list[int]
    candidate_ids: list[list[int]]
    # set when its caller is gone (timeout, disconnect): its remaining forward passes are
    # skipped
    abandoned: threading.Event = field(default_factory=threading.Event, compare=False)


class _StopAbandonedRows:
    """A transformers stopping criterion: a row whose job was abandoned is finished (rows of
    other jobs in the batch go on); every row is finished once the model is closing."""

    def __init__(self, rows: list[threading.Event], closing: threading.Event) -> None:
        self.rows, self.closing = rows, closing

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        closing = self.closing.is_set()
        done = [closing or row.is_set() for row in self.rows]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class LocalCausalLM:
    """A model and its tokenizer, with the two batched primitives the backend needs."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        score_chunk_tokens: int = 32_768,
        score_forward_tokens: int = 512,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        # candidate rows × (prompt + candidate) tokens per chunk of scoring rows: bounds the
        # memory of their KV caches
        self.score_chunk_tokens = score_chunk_tokens
        # tokens per scoring forward pass: a cancelled job stops after the pass in progress
        self.score_forward_tokens = score_forward_tokens
        self.score_forwards = 0  # forward passes scoring has run (tests, bench)
        self.closing = threading.Event()  # set on close: every generation stops at its next step
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else next(iter(self.eos_ids))
        self.device = next(model.parameters()).device
        self.prefix_cache = PrefixCache()

    # -- prompts ---------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        lines = [f"{m['role']}: {m['content']}" for m in messages]
        return "\n".join([*lines, "assistant:"])

    # -- generation ------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, jobs: list[_GenJob], stops: tuple[str, ...] = ()) -> list[Generation]:
        """One `generate` call for every row of every job (left-padded batch). Decoding is
        greedy; rows that sample draw their tokens in `RowSampler`, each from its own
        seeded generator, after guided decoding has masked what their grammar forbids."""
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        input_ids, mask = pad([job.prompt_ids for job in jobs for _ in range(job.n)], self.pad_id)
        width = input_ids.shape[1]
        config = GenerationConfig(
            max_new_tokens=max(job.max_tokens for job in jobs),
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids),
        )
        extra: dict[str, Any] = {}
        if stops:  # stop each row as soon as it ends with a stop string (cut again below)
            config.stop_strings = list(stops)
            extra["tokenizer"] = self.tokenizer
        processors = LogitsProcessorList()
        eos = sorted(self.eos_ids)
        per_job = [
            None if job.guided is None else LineAutomaton(job.guided, self.encode_batch, eos)
            for job in jobs
        ]  # the n rows of a job share its automaton (and its tries)
        automata = [a for a, job in zip(per_job, jobs, strict=True) for _ in range(job.n)]
        if any(automata):
            processors.append(GuidedLinesProcessor(automata, width))
        if any(job.temperature > 0 for job in jobs):  # last: it samples what is allowed
            samplings = [
                RowSampling(job.temperature, job.top_p, job.seed, index)
                for job in jobs
                for index in range(job.n)
            ]
            processors.append(RowSampler(samplings))
        if processors:
            extra["logits_processor"] = processors
        rows = [job.abandoned for job in jobs for _ in range(job.n)]
        extra["stopping_criteria"] = StoppingCriteriaList([_StopAbandonedRows(rows, self.closing)])
        output = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=mask.to(self.device),
            generation_config=config,
            **extra,
        )
        new_tokens = output[:, width:].tolist()
        results, row = [], 0
        for job in jobs:
            texts, reasons, completion_tokens = [], [], 0
            for tokens in new_tokens[row : row + job.n]:
                text, reason, used = self._finish(tokens[: job.max_tokens], job.stop)
                texts.append(text)
                reasons.append(reason)
                completion_tokens += used
            row += job.n
            results.append(Generation(texts, len(job.prompt_ids), completion_tokens, reasons))
        return results

    def _finish(self, tokens: list[int], stop: list[str] | None) -> tuple[str, str, int]:
        """Cut a row at its end-of-sequence token and stop strings: (text, reason, tokens)."""
        reason = "length"
        for i, token in enumerate(tokens):
            if token in self.eos_ids:
                tokens, reason = tokens[:i], "stop"
                break
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if stop:
            cuts = [text.find(s) for s in stop if s in text]
            if cuts:
                text, reason = text[: min(cuts)], "stop"
                return text, reason, len(self.encode(text))
        return text, reason, len(tokens)

    # -- scoring ---------------------------------------------------------------------------
    @torch.inference_mode()
    def score(self, jobs: list[_ScoreJob], cache_key: str = "") -> list[list[list[float]]]:
        """Log-probabilities of each candidate's tokens after its prompt.

        Pass 1 runs every distinct prompt once (left-padded) and keeps its KV cache; pass 2
        runs the candidates on top of their prompt's cache (right padded). Positions are given
        explicitly so padding never shifts them. A lone prompt that shares a prefix with a
        recent one (a planner's system prompt and few-shot examples) only runs its new suffix
        in pass 1 (`PrefixCache`; `cache_key` keeps adapters apart).

        Work is bounded per forward pass, so that a caller that left (timeout, disconnect,
        cancelled RPC: its job is `abandoned`) stops costing work within one pass: prompts
        batch only while their padded tokens fit `score_forward_tokens` (a longer lone prompt
        runs in segments on its cache); pass 2 runs in chunks of candidate rows
        (`score_chunk_tokens` bounds a chunk's KV memory) and each chunk in column segments
        of at most `score_forward_tokens`. Between passes the rows of abandoned jobs are
        dropped (their results are left incomplete: nobody reads them).
        """
        results: list[list[list[float]]] = [[] for _ in jobs]
        for group in self._prompt_groups(jobs):
            scored = self._score_group([jobs[i] for i in group], cache_key)
            for i, rows in zip(group, scored, strict=True):
                results[i] = rows
        return results

    def _stopped(self, jobs: list[_ScoreJob]) -> bool:
        return self.closing.is_set() or all(job.abandoned.is_set() for job in jobs)

    def _prompt_groups(self, jobs: list[_ScoreJob]) -> list[list[int]]:
        """Consecutive jobs whose left-padded prompts fit one pass of `score_forward_tokens`."""
        groups: list[list[int]] = []
        widest = 0
        for i, job in enumerate(jobs):
            width = max(widest, len(job.prompt_ids))
            if groups and width * (len(groups[-1]) + 1) <= self.score_forward_tokens:
                groups[-1].append(i)
            else:
                groups.append([i])
                width = len(job.prompt_ids)
            widest = width
        return groups

    def _score_group(self, jobs: list[_ScoreJob], cache_key: str) -> list[list[list[float]]]:
        """`score` for jobs whose prompts run in one pass (or a lone prompt, in segments)."""
        results: list[list[list[float]]] = [[] for _ in jobs]
        if self._stopped(jobs):
            return results
        prompt_len = torch.tensor([len(job.prompt_ids) for job in jobs])
        if len(jobs) == 1:
            prompt = self._prompt_pass_reusing_prefix(jobs[0], cache_key)
            if prompt is None:  # abandoned between its segments
                return results
            first_logits, cache = prompt
            prompt_mask = torch.ones((1, len(jobs[0].prompt_ids)), dtype=torch.long)
        else:
            first_logits, cache, prompt_mask = self._prompt_pass(jobs)
        next_logprobs = torch.log_softmax(first_logits.float(), dim=-1)

        rows = [(i, c) for i, job in enumerate(jobs) for c in job.candidate_ids]
        chunks = self._score_chunks(rows, jobs)
        for number, chunk in enumerate(chunks):
            chunk = [(i, c) for i, c in chunk if not jobs[i].abandoned.is_set()]
            if self.closing.is_set() or not chunk:
                continue
            # the last chunk may take the prompt cache; the others expand a copy of it
            chunk_cache = cache if number == len(chunks) - 1 else copy.deepcopy(cache)
            tails = self._candidate_pass(chunk, chunk_cache, prompt_len, prompt_mask, jobs)
            for (i, tokens), tail in zip(chunk, tails, strict=True):
                if tail is not None:
                    head = float(next_logprobs[i, tokens[0]])
                    results[i].append([head, *tail[: len(tokens) - 1]])
        return results

    def _score_chunks(
        self, rows: list[tuple[int, list[int]]], jobs: list[_ScoreJob]
    ) -> list[list[tuple[int, list[int]]]]:
        """Consecutive candidate rows, as many per chunk as `score_chunk_tokens` allows (and
        at most `score_forward_tokens`: one column of a chunk is one forward pass's rows)."""
        chunks: list[list[tuple[int, list[int]]]] = [[]]
        widest = 0
        for owner, tokens in rows:
            width = max(widest, len(jobs[owner].prompt_ids) + len(tokens))
            full = len(chunks[-1]) + 1 > self.score_forward_tokens
            if chunks[-1] and (full or width * (len(chunks[-1]) + 1) > self.score_chunk_tokens):
                chunks.append([])
                width = len(jobs[owner].prompt_ids) + len(tokens)
            chunks[-1].append((owner, tokens))
            widest = width
        return chunks

    def _candidate_pass(
        self,
        chunk: list[tuple[int, list[int]]],
        cache: Any,
        prompt_len: torch.Tensor,
        prompt_mask: torch.Tensor,
        jobs: list[_ScoreJob],
    ) -> list[list[float] | None]:
        """Candidate rows on their prompt's KV cache, in column segments of at most
        `score_forward_tokens` tokens: per row, the log-probs of its tokens after the first
        (padding included; None for a row whose job was abandoned before it was done)."""
        owner = torch.tensor([i for i, _ in chunk])
        cache.reorder_cache(owner.to(self.device))  # one copy of the prompt per row
        cand_ids, cand_mask = pad([tokens for _, tokens in chunk], self.pad_id, left=False)
        tails: list[list[float] | None] = [[] for _ in chunk]
        alive = list(range(len(chunk)))  # the rows the cache holds, in its order
        inputs = cand_ids.shape[1] - 1  # the last token predicts nothing we score
        step = max(1, self.score_forward_tokens // len(chunk))
        for start in range(0, inputs, step):
            if start:
                alive = self._drop_abandoned(alive, chunk, cache, jobs, tails)
                if not alive:
                    break
            end = min(start + step, inputs)
            rows = torch.tensor(alive)
            positions = prompt_len[owner[rows]].unsqueeze(1) + torch.arange(start, end)
            out = self.model(
                input_ids=cand_ids[rows, start:end].to(self.device),
                attention_mask=torch.cat(
                    [prompt_mask[owner[rows]], cand_mask[rows, :end]], dim=1
                ).to(self.device),
                position_ids=positions.to(self.device),
                past_key_values=cache,
                use_cache=True,
            )
            self.score_forwards += 1
            logprobs = torch.log_softmax(out.logits.float(), dim=-1)
            targets = cand_ids[rows, start + 1 : end + 1].to(logprobs.device)
            picked = logprobs.gather(2, targets.unsqueeze(2)).squeeze(2).tolist()
            for row, values in zip(alive, picked, strict=True):
                tails[row].extend(values)  # type: ignore[union-attr]
        return tails

    def _drop_abandoned(
        self,
        alive: list[int],
        chunk: list[tuple[int, list[int]]],
        cache: Any,
        jobs: list[_ScoreJob],
        tails: list[list[float] | None],
    ) -> list[int]:
        """The rows still wanted (none once the model is closing); the others leave the cache."""
        closing = self.closing.is_set()
        keep = [
            k
            for k, row in enumerate(alive)
            if not closing and not jobs[chunk[row][0]].abandoned.is_set()
        ]
        if len(keep) == len(alive):
            return alive
        for k, row in enumerate(alive):
            if k not in keep:
                tails[row] = None
        if keep:
            cache.reorder_cache(torch.tensor(keep, device=self.device))
        return [alive[k] for k in keep]

    def _prompt_pass(self, jobs: list[_ScoreJob]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Every prompt of the batch, left-padded: (last logits, KV cache, attention mask)."""
        prompt_ids, prompt_mask = pad([job.prompt_ids for job in jobs], self.pad_id)
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=prompt_ids.to(self.device),
            attention_mask=prompt_mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            logits_to_keep=1,
        )
        self.score_forwards += 1
        return out.logits[:, -1, :], out.past_key_values, prompt_mask

    def _prompt_pass_reusing_prefix(self, job: _ScoreJob, cache_key: str) -> tuple[Any, Any] | None:
        """One prompt: run only what follows the longest cached prefix, in segments of at most
        `score_forward_tokens`; remember the result. None: its job was abandoned meanwhile."""
        ids = job.prompt_ids
        start, cache = self.prefix_cache.lookup(cache_key, ids)  # (0, None) when none
        logits = None
        for begin in range(start, len(ids), self.score_forward_tokens):
            if begin > start and self._stopped([job]):
                return None
            end = min(begin + self.score_forward_tokens, len(ids))
            out = self.model(
                input_ids=torch.tensor([ids[begin:end]], device=self.device),
                position_ids=torch.arange(begin, end, device=self.device)[None],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            self.score_forwards += 1
            cache, logits = out.past_key_values, out.logits[:, -1, :]
        self.prefix_cache.store(cache_key, ids, cache)
        return logits, cache


class PrefixCache:
    """KV caches of the last few scored prompts, reused for a new prompt's common prefix.

    Stored caches are copies (pass 2 expands the live one per candidate); a lookup returns a
    copy cropped to the shared prefix, which must keep at least one token to recompute.
    """

    def __init__(self, entries: int = 8, min_prefix: int = 16) -> None:
        self.entries = entries
        self.min_prefix = min_prefix
        self._items: list[tuple[str, tuple[int, ...], Any]] = []  # most recent last

    def lookup(self, key: str, ids: list[int]) -> tuple[int, Any]:
        best, best_len = None, 0
        for item in self._items:
            if item[0] != key:
                continue
            shared = _common_prefix(item[1], ids)
            if shared > best_len:
                best, best_len = item, shared
        best_len = min(best_len, len(ids) - 1)
        if best is None or best_len < self.min_prefix:
            return 0, None
        cache = copy.deepcopy(best[2])
        surplus = cache.get_seq_length() - best_len
        if surplus:
            cache.crop(-surplus)  # transformers 5: a negative count of tokens to drop
        return best_len, cache

    def store(self, key: str, ids: list[int], cache: Any) -> None:
        if self.entries <= 0:
            return
        self._items = [item for item in self._items if (item[0], item[1]) != (key, tuple(ids))]
        self._items.append((key, tuple(ids), copy.deepcopy(cache)))
        del self._items[: -self.entries]


def _common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Adapters:
    """LoRA adapters of one base model, loaded once with peft and switched by name."""

    def __init__(self, model: Any, model_name: str, configured: dict[str, dict[str, str]]) -> None:
        self.base = model
        self.model_name = model_name
        self.configured = configured
        self.peft_model: Any = None
        self.loaded: set[str] = set()

    def path(self, adapter: str) -> Path:
        name, version = check_adapter(adapter)
        path = self.configured.get(name, {}).get(version)
        candidate = (
            Path(path) if path else home_dir() / "adapters" / self.model_name / name / version
        )
        if not (candidate / "adapter_config.json").exists():
            # the message names the adapter, never the folder it was looked for in
            known = [f"{n}@{v}" for n, versions in self.configured.items() for v in versions]
            raise InvalidRequestError(
                f"model: adapter {adapter!r} of {self.model_name!r} not found (neither "
                f"configured nor trained under the adapters folder); configured adapters: "
                f"{', '.join(known) or '(none)'}",
                "model",
            )
        return candidate

    @staticmethod
    def _peft_name(adapter: str) -> str:
        return "a_" + re.sub(r"[^A-Za-z0-9_]", "_", adapter)

    def ensure_loaded(self, adapter: str) -> None:
        """Load `adapter` next to the others (the base model's weights are not touched)."""
        if not adapter or adapter in self.loaded:
            return
        path = self.path(adapter)
        if self.peft_model is None:
            from peft import PeftModel

            self.peft_model = PeftModel.from_pretrained(
                self.base, str(path), adapter_name=self._peft_name(adapter)
            )
            self.peft_model.eval()
        else:
            self.peft_model.load_adapter(str(path), adapter_name=self._peft_name(adapter))
        self.loaded.add(adapter)

    @contextmanager
    def active(self, adapter: str) -> Iterator[None]:
        """Within the block, calls to the base model apply `adapter` ("" = none)."""
        if self.peft_model is None:
            yield
        elif not adapter:
            with self.peft_model.disable_adapter():
                yield
        else:
            self.peft_model.set_adapter(self._peft_name(adapter))
            yield


@registry.register_backend(
    "hf",
    description="Local transformers causal LM (LoRA, batching)",
    requires=("torch", "transformers", "peft"),
    extra="llm",
)
class TransformersBackend(Backend):
    """A local Hugging Face causal LM; concurrent requests are batched by one model thread."""

    ops = frozenset({"chat", "completion", "score"})
    guided_decoding = True

    def __init__(self, name: str, config: ModelConfig, settings: GatewaySettings) -> None:
        super().__init__(name, config, settings)
        from transformers import AutoModelForCausalLM, AutoTokenizer

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
        self.lm = LocalCausalLM(model, tokenizer, config.score_chunk_tokens, forward_tokens)
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
        stops = tuple(sorted(request.stop or ()))
        group = _GenGroup(adapter, stops)
        if request.temperature > 0:
            job = _GenJob(
                prompt_ids, request.n, request.max_tokens, request.stop, request.guided_lines,
                request.temperature, request.top_p, request.seed, request.abandoned,
            )  # fmt: skip
            return self._wait(self.batcher.submit("generate", group, job), timeout_s, job.abandoned)
        # greedy: the n answers are identical, so compute one and repeat it
        job = _GenJob(
            prompt_ids, 1, request.max_tokens, request.stop, request.guided_lines,
            abandoned=request.abandoned,
        )  # fmt: skip
        one = self._wait(self.batcher.submit("generate", group, job), timeout_s, job.abandoned)
        n = request.n
        return Generation(
            one.texts * n, one.prompt_tokens, one.completion_tokens * n, one.finish_reasons * n
        )

    def score(self, request: ScoreRequest, adapter: str, timeout_s: float) -> Scores:
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
        job = _ScoreJob(prompt_ids, candidate_ids, request.abandoned)
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
                    else f"model {self.name!r} did not answer within {timeout_s:g} s",
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

    # -- the model thread ----------------------------------------------------------------
    def _run_group(self, kind: str, group: Hashable, jobs: list[Any]) -> list[Any]:
        adapter = group[0]  # type: ignore[index]
        self.adapters.ensure_loaded(adapter)
        with self.adapters.active(adapter):
            if kind == "score":
                return self.lm.score(jobs, cache_key=adapter)
            return self.lm.generate(jobs, group.stops)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.lm.closing.set()  # a generation in progress stops now, so shutdown is prompt
        self.batcher.close()
