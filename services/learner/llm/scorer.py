"""Candidate scores of a causal LM: B prompts x K candidates, the prompt's KV cache shared.

Pass 1 runs the B prompts once, left-padded (positions counted from each row's first real
token, so padding never shifts them), keeping the KV cache and the last prompt token's final
hidden state (the heads' input). Pass 2 runs the B*K candidates, right-padded, on the prompt
cache repeated K times. A candidate's score is the sum of its tokens' log-probabilities
(`reduction="sum"`, GLAM's) or their mean (`"mean"`: long phrases are not penalised).

Differentiable by default (PPO's update); wrap in `torch.no_grad()` for rollouts. The
gateway's scorer does the same under inference mode with a cross-request prefix cache; this
one is kept apart because it must carry gradients through LoRA and heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

REDUCTIONS = ("sum", "mean")


class Scores(NamedTuple):
    scores: Any  # [B, K] float32: each candidate's summed (or mean) token log-probability
    hidden: Any  # [B, H] float32: the final hidden state of each prompt's last token


def pad(rows: Sequence[Sequence[int]], pad_id: int, left: bool) -> tuple[Any, Any]:
    """Token rows as one (ids, attention mask) batch, padded on the left or the right."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        cols = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, cols] = torch.tensor(list(row), dtype=torch.long)
        mask[i, cols] = 1
    return ids, mask


def score_candidates(
    policy: Any,
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[int]],
    reduction: str = "sum",
) -> Scores:
    """Scores of the same `candidates` (token ids, each non-empty) after each of `prompts`
    (token ids); `policy` is an `LlmPolicyModel` (or anything with model, pad_id, autocast)."""
    import torch

    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: expected one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if not prompts or not candidates or any(not c for c in candidates):
        raise ValueError("score_candidates: needs prompts and non-empty candidates")
    base = (
        policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
    )
    decoder, lm_head = base.get_decoder(), base.get_output_embeddings()
    device = policy.device
    batch, count = len(prompts), len(candidates)

    with policy.autocast():
        # 1. the prompts, once each
        prompt_ids, prompt_mask = pad(prompts, policy.pad_id, left=True)
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
        first = decoder(
            input_ids=prompt_ids.to(device),
            attention_mask=prompt_mask.to(device),
            position_ids=positions.to(device),
            use_cache=True,
        )
        hidden = first.last_hidden_state[:, -1]  # left padding: the last column is real
        first_logprobs = torch.log_softmax(lm_head(hidden).float(), dim=-1)  # [B, V]

        # 2. every candidate on its prompt's cache
        owner = torch.arange(batch).repeat_interleave(count)  # row r belongs to prompt owner[r]
        cache = first.past_key_values
        cache.reorder_cache(owner.to(device))  # index_select: gradients flow back to pass 1
        cand_ids, cand_mask = pad(candidates, policy.pad_id, left=False)  # [K, C]
        width = cand_ids.shape[1]
        rows_ids = cand_ids.repeat(batch, 1)
        rows_mask = cand_mask.repeat(batch, 1)
        prompt_len = prompt_mask.sum(-1)
        cand_positions = prompt_len[owner].unsqueeze(1) + torch.arange(width)
        logprob_first = first_logprobs[owner, rows_ids[:, 0].to(device)]  # [B*K]
        token_logprobs = [logprob_first.unsqueeze(1)]
        if width > 1:
            second = decoder(
                input_ids=rows_ids[:, :-1].to(device),
                attention_mask=torch.cat([prompt_mask[owner], rows_mask[:, :-1]], 1).to(device),
                position_ids=cand_positions[:, :-1].to(device),
                past_key_values=cache,
                use_cache=True,
            )
            logprobs = torch.log_softmax(lm_head(second.last_hidden_state).float(), dim=-1)
            targets = rows_ids[:, 1:].to(device)
            token_logprobs.append(logprobs.gather(2, targets.unsqueeze(2)).squeeze(2))
        per_token = torch.cat(token_logprobs, 1) * rows_mask.to(device)  # [B*K, C]
        total = per_token.sum(1)
        if reduction == "mean":
            total = total / rows_mask.sum(1).to(device)
    return Scores(total.view(batch, count), hidden.float())
