"""The local causal LM behind the `hf` backend: a transformers model and its tokenizer with
batched generation (per-row sampling, guided lines, stops) and scoring that computes each
prompt's KV cache once, plus its LoRA adapters switched by name. `deterministic` (the
default) computes every request in shapes of its own, so that its answer is bitwise the same
alone or batched with any others.

Kept apart from the backend module (`backends/transformers_local.py`: its settings and the
request mapping) so that loading the gateway's settings or listing backends never imports
torch; the backend imports this when it loads a model.
"""

from __future__ import annotations

import copy
import hashlib
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from llmrl.common.config import home_dir
from llmrl.common.numerics import computes_bf16
from llmrl.common.token_batches import pad
from llmrl.llm_gateway.api_types import GuidedLines
from llmrl.llm_gateway.backends.base import Generation
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.guided import GuidedLinesProcessor, LineAutomaton
from llmrl.llm_gateway.names import check_adapter
from llmrl.llm_gateway.sampling import RowSampler, RowSampling

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def default_forward_tokens(device: torch.device) -> int:
    """Tokens per scoring forward pass when the model's settings name none: about a second's
    work on a small CPU (what a cancelled score may still cost), far more on a GPU."""
    return 512 if device.type == "cpu" else 8192


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """A model's dtype: its own setting, or for `auto` the process's precision
    ($LLMRL_PRECISION, float32 unless set: never a per-machine choice by default)."""
    if name == "auto":
        return torch.bfloat16 if computes_bf16(device) else torch.float32
    return DTYPES[name]


@dataclass
class GenJob:
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


class GenGroup(NamedTuple):
    """What generate requests must share to run in one batch."""

    adapter: str
    stops: tuple[str, ...]  # rows of a batch stop early on the same strings


@dataclass
class ScoreJob:
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
        deterministic: bool = True,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        # every row computed in shapes that depend on its own request only (`score`,
        # `generate`): its answer is bitwise the same alone or in any batch
        self.deterministic = deterministic
        # candidate rows × (prompt + candidate) tokens per chunk of scoring rows: bounds the
        # memory of their KV caches
        self.score_chunk_tokens = score_chunk_tokens
        # tokens per scoring forward pass: a cancelled job stops after the pass in progress
        self.score_forward_tokens = score_forward_tokens
        self.score_forwards = 0  # forward passes scoring has run (tests, bench)
        # forward passes of generation's chunked prefill (`_prefill`; tests, bench): a prompt
        # longer than `score_forward_tokens` runs in chunks of its own before `model.generate`
        self.prefill_forwards = 0
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
    def generate(self, jobs: list[GenJob], stops: tuple[str, ...] = ()) -> list[Generation]:
        """Every row of every job: greedy decoding; rows that sample draw their tokens in
        `RowSampler`, each from its own seeded generator, after guided decoding has masked
        what their grammar forbids.

        Batched (not `deterministic`): one `generate` call for all rows, left-padded.
        Deterministic: one `generate` call per row (batch 1, no padding). A row's logits
        depend on the shape of the pass that computes them (rows, padded width: the kernels'
        reduction order changes with them), so a greedy token near a tie or a sampled one
        near a boundary could change with what shared the batch; alone, a row's shapes are
        those of its own prompt and tokens. Rows of a job already abandoned (or of a closing
        model) are not started; their texts are left empty (nobody reads them).

        A prompt (or left-padded batch) wider than one forward pass of `score_forward_tokens`
        tokens is prefilled in chunks on its KV cache first (`_prefill`), so that a row whose
        caller left, whose deadline passed (the backend abandons its job) or whose model is
        closing stops within one chunk, as a score does, not after its whole prompt; decoding
        then goes on from that cache.
        """
        rows = [(job, index) for job in jobs for index in range(job.n)]
        if self.deterministic:
            tokens: list[list[int]] = []
            for row in rows:
                if self.closing.is_set() or row[0].abandoned.is_set():
                    tokens.append([])
                else:
                    tokens.extend(self._generate_rows([row], stops))
        else:
            tokens = self._generate_rows(rows, stops)
        results, start = [], 0
        for job in jobs:
            texts, reasons, completion_tokens = [], [], 0
            for row_tokens in tokens[start : start + job.n]:
                text, reason, used = self._finish(row_tokens[: job.max_tokens], job.stop)
                texts.append(text)
                reasons.append(reason)
                completion_tokens += used
            start += job.n
            results.append(Generation(texts, len(job.prompt_ids), completion_tokens, reasons))
        return results

    def _generate_rows(
        self, rows: list[tuple[GenJob, int]], stops: tuple[str, ...]
    ) -> list[list[int]]:
        """`rows` ((job, index of the row among its job's n)) as one left-padded batch: the
        new tokens of each row (past its end: padding; none for a row whose job was abandoned,
        or for every row once the model is closing, before its decoding began)."""
        input_ids, mask = pad([job.prompt_ids for job, _ in rows], self.pad_id)
        prefilled = self._prefill(rows, input_ids, mask)
        tokens: list[list[int]] = [[] for _ in rows]
        if prefilled is None:
            return tokens
        alive, cache = prefilled
        keep = torch.tensor(alive)
        decoded = self._decode([rows[i] for i in alive], input_ids[keep], mask[keep], cache, stops)
        for i, row_tokens in zip(alive, decoded, strict=True):
            tokens[i] = row_tokens
        return tokens

    def _prefill(
        self, rows: list[tuple[GenJob, int]], input_ids: torch.Tensor, mask: torch.Tensor
    ) -> tuple[list[int], Any] | None:
        """The prompts' columns up to their last chunk, in forward passes of at most
        `score_forward_tokens` tokens (rows x columns) on their growing KV cache: (the rows
        still wanted, that cache: None when the prompts fit one pass). `model.generate` then
        computes the last chunk (at most one pass too) and decodes on the cache.

        Between passes it checks the jobs' `abandoned` and the model's `closing` events: the
        rows of an abandoned job leave the cache, and None means that no row is left. A
        prompt that fits one pass has no chunk here, so it runs exactly as without chunking;
        chunks start at multiples of the step counted from the first column (at batch 1: of
        `score_forward_tokens` from the prompt's first token), so a row's passes depend on its
        own prompt only on the deterministic path. Positions follow the attention mask as in
        `generate` (left padding never shifts them)."""
        step = max(1, self.score_forward_tokens // len(rows))
        last = (input_ids.shape[1] - 1) // step * step  # where the last chunk starts
        alive, cache = list(range(len(rows))), None
        for begin in range(0, last, step):
            if begin:
                alive = self._rows_wanted(alive, rows, cache)
                if not alive:
                    return None
            keep = torch.tensor(alive)
            seen = mask[keep, : begin + step]
            positions = (seen.cumsum(-1) - 1).clamp(min=0)[:, begin:]
            out = self.model(
                input_ids=input_ids[keep, begin : begin + step].to(self.device),
                attention_mask=seen.to(self.device),
                position_ids=positions.to(self.device),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            self.prefill_forwards += 1
            cache = out.past_key_values
        if last:
            alive = self._rows_wanted(alive, rows, cache)
            if not alive:
                return None
        return alive, cache

    def _rows_wanted(
        self, alive: list[int], rows: list[tuple[GenJob, int]], cache: Any
    ) -> list[int]:
        """The rows of `alive` whose jobs are still wanted (none once the model is closing);
        the others leave `cache`."""
        if self.closing.is_set():
            return []
        keep = [k for k, i in enumerate(alive) if not rows[i][0].abandoned.is_set()]
        if keep and len(keep) < len(alive):
            cache.reorder_cache(torch.tensor(keep, device=self.device))
        return [alive[k] for k in keep]

    def _decode(
        self,
        rows: list[tuple[GenJob, int]],
        input_ids: torch.Tensor,
        mask: torch.Tensor,
        cache: Any,
        stops: tuple[str, ...],
    ) -> list[list[int]]:
        """One `generate` call for `rows`, left-padded as `input_ids` and `mask`, on `cache`
        (their KV up to the last chunk; None: none): the new tokens of each row."""
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        width = input_ids.shape[1]
        config = GenerationConfig(
            max_new_tokens=max(job.max_tokens for job, _ in rows),
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids),
        )
        extra: dict[str, Any] = {}
        if cache is not None:  # generate computes the columns the cache lacks, then decodes
            extra["past_key_values"] = cache
        if stops:  # stop each row as soon as it ends with a stop string (cut again later)
            config.stop_strings = list(stops)
            extra["tokenizer"] = self.tokenizer
        processors = LogitsProcessorList()
        eos = sorted(self.eos_ids)
        automata: dict[int, LineAutomaton] = {}  # the rows of a job share its automaton
        for job, _ in rows:
            if job.guided is not None and id(job) not in automata:
                automata[id(job)] = LineAutomaton(job.guided, self.encode_batch, eos)
        if automata:
            per_row = [automata.get(id(job)) for job, _ in rows]
            processors.append(GuidedLinesProcessor(per_row, width))
        if any(job.temperature > 0 for job, _ in rows):  # last: it samples what is allowed
            samplings = [
                RowSampling(job.temperature, job.top_p, job.seed, index) for job, index in rows
            ]
            processors.append(RowSampler(samplings))
        if processors:
            extra["logits_processor"] = processors
        abandoned = [job.abandoned for job, _ in rows]
        extra["stopping_criteria"] = StoppingCriteriaList(
            [_StopAbandonedRows(abandoned, self.closing)]
        )
        output = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=mask.to(self.device),
            generation_config=config,
            **extra,
        )
        return output[:, width:].tolist()

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
    def score(self, jobs: list[ScoreJob], cache_key: str = "") -> list[list[list[float]]]:
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

        Deterministic: every job runs on its own, at batch 1: its prompt in segments that
        start at multiples of `score_forward_tokens` counted from its first token (the prefix
        cache reuses only whole segments, so a hit computes exactly the passes a miss
        computes after them); then, when they fit one pass, its prompt's last segment and all
        its candidates in one pass under a tree-shaped attention mask (`_score_packed`), else
        that segment alone and its candidates as one right-padded batch on its cache, chunked
        and segmented by the job's own sizes (as a lone job runs in the batched path). Every
        pass thus has a shape (rows, tokens, cached length) set by the job alone, never by
        the other jobs of the batch nor by what was scored before, and the kernels' reduction
        order, which changes with the shape, is the same each time: a job's log-probs are
        bitwise the same alone or in any batch. Its candidates share passes with each other
        (not with other jobs): one pass for all of them costs about one candidate's pass on a
        CPU, where a pass per candidate would cost K.
        """
        results: list[list[list[float]]] = [[] for _ in jobs]
        if self.deterministic:
            for i, job in enumerate(jobs):
                if self._packs(job):
                    results[i] = self._score_packed(job, cache_key)
                else:
                    (results[i],) = self._score_group([job], cache_key)
            return results
        for group in self._prompt_groups(jobs):
            scored = self._score_group([jobs[i] for i in group], cache_key)
            for i, rows in zip(group, scored, strict=True):
                results[i] = rows
        return results

    def _stopped(self, jobs: list[ScoreJob]) -> bool:
        return self.closing.is_set() or all(job.abandoned.is_set() for job in jobs)

    def _prompt_groups(self, jobs: list[ScoreJob]) -> list[list[int]]:
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

    def _score_group(self, jobs: list[ScoreJob], cache_key: str) -> list[list[list[float]]]:
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
        self, rows: list[tuple[int, list[int]]], jobs: list[ScoreJob]
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
        jobs: list[ScoreJob],
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
        jobs: list[ScoreJob],
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

    def _prompt_pass(self, jobs: list[ScoreJob]) -> tuple[torch.Tensor, Any, torch.Tensor]:
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

    def _prompt_pass_reusing_prefix(self, job: ScoreJob, cache_key: str) -> tuple[Any, Any] | None:
        """One prompt: run only what follows the longest cached prefix, in segments of at most
        `score_forward_tokens`; remember the result. None: its job was abandoned meanwhile.
        Deterministic: the prefix reused is a whole number of segments, so the segments
        start at the same multiples of `score_forward_tokens` with or without a hit."""
        ids = job.prompt_ids
        block = self.score_forward_tokens if self.deterministic else 1
        start, cache = self.prefix_cache.lookup(cache_key, ids, block)  # (0, None) when none
        ran = self._prompt_segments(job, start, len(ids), cache)
        if ran is None:
            return None
        logits, cache = ran
        self.prefix_cache.store(cache_key, ids, cache)
        return logits, cache

    def _prompt_segments(
        self, job: ScoreJob, start: int, end: int, cache: Any
    ) -> tuple[Any, Any] | None:
        """The prompt's tokens start..end on `cache` (None: empty), in segments of at most
        `score_forward_tokens` starting at `start`: (last logits, cache), or None when its
        job was abandoned between segments (or None, cache when there was nothing to run)."""
        ids, logits = job.prompt_ids, None
        for begin in range(start, end, self.score_forward_tokens):
            if begin > start and self._stopped([job]):
                return None
            stop = min(begin + self.score_forward_tokens, end)
            out = self.model(
                input_ids=torch.tensor([ids[begin:stop]], device=self.device),
                position_ids=torch.arange(begin, stop, device=self.device)[None],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            self.score_forwards += 1
            cache, logits = out.past_key_values, out.logits[:, -1, :]
        return logits, cache

    # -- deterministic scoring: a job's candidates packed after its prompt -------------------
    def _packs(self, job: ScoreJob) -> bool:
        """Whether the job's last prompt segment and all its candidates fit one forward pass
        (`score_forward_tokens`) and their KV cache one chunk (`score_chunk_tokens`)."""
        segment = self.score_forward_tokens
        n = len(job.prompt_ids)
        packed = sum(len(c) for c in job.candidate_ids)
        last = (n - 1) // segment * segment  # where the prompt's last segment starts
        return n - last + packed <= segment and n + packed <= self.score_chunk_tokens

    def _score_packed(self, job: ScoreJob, cache_key: str) -> list[list[float]]:
        """Deterministic scoring of one job in one pass after its prompt's whole segments: the
        prompt's last segment and every candidate, packed one after the other, under an
        attention mask where each candidate sees the prompt and its own earlier tokens only
        (positions as if it alone followed the prompt). One pass of ~n + K·c tokens instead
        of a pass for the prompt's last segment and another for the candidates: on a CPU,
        where a pass has a large fixed cost, about 1.15-1.2x a forward of the prompt against
        1.3-1.5x. Its shape is the job's own, so it is as batch-invariant as the two passes.

        The prompt's KV is stored in the prefix cache without the candidates'. Its last
        segment, computed beside them, is never reused: it is partial (a whole one leaves no
        room for candidates in the pass), and a hit is cut to whole segments.
        [] when the job was abandoned (nobody reads it)."""
        if self._stopped([job]):
            return []
        ids, segment = job.prompt_ids, self.score_forward_tokens
        n = len(ids)
        last = (n - 1) // segment * segment
        start, cache = self.prefix_cache.lookup(cache_key, ids, segment)  # start <= last
        ran = self._prompt_segments(job, start, last, cache)
        if ran is None or (last > start and self._stopped([job])):
            return []
        cache = ran[1]
        tokens = ids[last:] + [t for c in job.candidate_ids for t in c]
        head = n - last
        width = len(tokens)
        allowed = torch.zeros((width, last + width), dtype=torch.bool)
        allowed[:, :last] = True  # the prompt's whole segments, cached
        allowed[:head, last : last + head] = torch.ones(head, head, dtype=torch.bool).tril()
        positions = list(range(last, n))
        offset = head
        for cand in job.candidate_ids:
            rows = slice(offset, offset + len(cand))
            allowed[rows, last : last + head] = True
            causal = torch.ones(len(cand), len(cand), dtype=torch.bool).tril()
            allowed[rows, last + offset : last + offset + len(cand)] = causal
            positions.extend(range(n, n + len(cand)))
            offset += len(cand)
        dtype = next(self.model.parameters()).dtype  # additive: sdpa and eager alike
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        out = self.model(
            input_ids=torch.tensor([tokens], device=self.device),
            attention_mask=mask[None, None].to(self.device),
            position_ids=torch.tensor([positions], device=self.device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=width - head + 1,  # the prompt's last token and the candidates'
        )
        self.score_forwards += 1
        cache = out.past_key_values
        logprobs = torch.log_softmax(out.logits[0].float(), dim=-1)
        results, offset = [], 1  # row 0: after the prompt; then each candidate's tokens
        for cand in job.candidate_ids:
            picked = logprobs[offset : offset + len(cand) - 1].gather(
                1, torch.tensor(cand[1:], device=logprobs.device).unsqueeze(1)
            )
            results.append([float(logprobs[0, cand[0]]), *picked.squeeze(1).tolist()])
            offset += len(cand)
        cache.crop(-(width - head))  # the candidates' KV
        self.prefix_cache.store(cache_key, ids, cache)
        return results


class PrefixCache:
    """KV caches of the last few scored prompts, reused for a new prompt's common prefix.

    Stored caches are copies (pass 2 expands the live one per candidate); a lookup returns a
    copy cropped to the shared prefix, which must keep at least one token to recompute (and,
    with `block`, is cut down to a multiple of `block` tokens).
    """

    def __init__(self, entries: int = 8, min_prefix: int = 16) -> None:
        self.entries = entries
        self.min_prefix = min_prefix
        self._items: list[tuple[str, tuple[int, ...], Any]] = []  # most recent last

    def lookup(self, key: str, ids: list[int], block: int = 1) -> tuple[int, Any]:
        best, best_len = None, 0
        for item in self._items:
            if item[0] != key:
                continue
            shared = _common_prefix(item[1], ids)
            if shared > best_len:
                best, best_len = item, shared
        best_len = min(best_len, len(ids) - 1)
        best_len -= best_len % block
        if best is None or best_len < max(self.min_prefix, 1):
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
    """LoRA adapters of one base model, loaded once with peft and switched by name.

    Two kinds: versions found by name (`<adapter>@<version>`: the model's `adapters` setting or
    `$LLMRL_HOME/adapters/<model>/<adapter>/<version>`), loaded on first use; and adapters
    loaded at runtime under a name the caller chose (vLLM's `/v1/load_lora_adapter`), whose
    keys start with `RUNTIME_PREFIX` (`runtime_key`) so that they never meet a version's name.
    Every peft call runs on the model thread (the backend's batcher), so no forward pass ever
    sees an adapter appear or go."""

    RUNTIME_PREFIX = "="

    def __init__(self, model: Any, model_name: str, configured: dict[str, dict[str, str]]) -> None:
        self.base = model
        self.model_name = model_name
        self.configured = configured
        self.peft_model: Any = None
        self.loaded: set[str] = set()
        self.runtime: dict[str, Path] = {}  # runtime key -> its checked folder

    @classmethod
    def runtime_key(cls, lora_name: str, content: str) -> str:
        """The adapter key of a runtime adapter: its name and its weights' digest, so that a
        name loaded again with other weights never shares cached answers with the old ones."""
        return f"{cls.RUNTIME_PREFIX}{lora_name}#{content[:16]}"

    def path(self, adapter: str) -> Path:
        if adapter.startswith(self.RUNTIME_PREFIX):
            runtime = self.runtime.get(adapter)
            if runtime is None:  # unloaded while the request was on its way
                name = adapter[len(self.RUNTIME_PREFIX) :].rpartition("#")[0]
                raise InvalidRequestError(f"model: LoRA adapter {name!r} was unloaded", "model")
            return runtime
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

    @classmethod
    def _peft_name(cls, adapter: str) -> str:
        if adapter.startswith(cls.RUNTIME_PREFIX):  # any text: a digest keeps names apart
            return "r_" + hashlib.sha256(adapter.encode()).hexdigest()[:24]
        return "a_" + re.sub(r"[^A-Za-z0-9_]", "_", adapter)

    def ensure_loaded(self, adapter: str) -> None:
        """Load `adapter` next to the others (the base model's weights are not touched)."""
        if not adapter or adapter in self.loaded:
            return
        self._load(self.path(adapter), adapter)

    def _load(self, path: Path, adapter: str) -> None:
        if self.peft_model is None:
            from peft import PeftModel

            self.peft_model = PeftModel.from_pretrained(
                self.base, str(path), adapter_name=self._peft_name(adapter)
            )
            self.peft_model.eval()
        else:
            self.peft_model.load_adapter(str(path), adapter_name=self._peft_name(adapter))
        self.loaded.add(adapter)

    def load_runtime(self, adapter: str, path: Path) -> None:
        """Load a runtime adapter now (on the model thread): a folder that does not fit the
        base model is refused here, naming `lora_path`, not at its first request."""
        if adapter in self.loaded:  # the same name and weights, kept since an unload
            self.runtime[adapter] = path
            return
        try:
            self._load(path, adapter)
        except Exception as exc:  # peft's and torch's refusals: shapes, modules, config
            raise InvalidRequestError(
                f"lora_path: the adapter does not load on model {self.model_name!r}: "
                f"{type(exc).__name__}: {str(exc)[:300]}",
                "lora_path",
            ) from None
        self.runtime[adapter] = path

    def unload_runtime(self, adapter: str) -> None:
        """Forget a runtime adapter and free its weights (on the model thread). peft keeps
        at least one adapter: the last one stays loaded, unreachable, until another comes."""
        self.runtime.pop(adapter, None)
        if adapter not in self.loaded:
            return
        if len(self.peft_model.peft_config) > 1:
            self.peft_model.delete_adapter(self._peft_name(adapter))
            self.loaded.discard(adapter)

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
