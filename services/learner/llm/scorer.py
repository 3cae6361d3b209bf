"""Candidate scores of a causal LM: B prompts x K candidates, the prompt's KV cache shared.

Pass 1 runs the B prompts once, left-padded (positions counted from each row's first real
token, so padding never shifts them), keeping the KV cache and the last prompt token's final
hidden state (the heads' input). Pass 2 runs the B*K candidates, right-padded, on the prompt
cache repeated K times. A candidate's score is the sum of its tokens' log-probabilities
(`reduction="sum"`, GLAM's) or their mean (`"mean"`: long phrases are not penalised).

Frozen lower layers (LoRA on the top layers only, `LlmPolicyModel.frozen_layers`): with
`keep_frozen=True` the rollout's scoring also returns, per prompt, the hidden states entering
the first trainable layer (`FrozenStates`: the prompt's real tokens and the candidates' input
tokens). They never change while only the top layers train, so every PPO epoch scores the
same samples by `score_from_frozen`, which runs only the top layers (and the norm and LM
head) from them: the same log-probabilities, hidden states and gradients as a full pass.
Memory per sample: (prompt tokens + K x (longest candidate - 1)) x hidden size x 4 bytes
(SmolLM2-135M, 576 wide, a 160-token prompt: ~0.38 MB).

The decoder is run layer by layer (Llama-family modules: `embed_tokens`, `layers`,
`rotary_emb`, `norm`), with transformers' own causal-mask builder and KV cache.
Differentiable by default (PPO's update); wrap in `torch.no_grad()` for rollouts. The
gateway's scorer does the same under inference mode with a cross-request prefix cache; this
one is kept apart because it must carry gradients through LoRA and heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, get_args

from llmrl.common.token_batches import pad

# a candidate's score: its tokens' log-probs summed, or their mean
Reduction = Literal["sum", "mean"]
REDUCTIONS: tuple[str, ...] = get_args(Reduction)


class FrozenStates(NamedTuple):
    """One prompt's hidden states entering the first trainable decoder layer."""

    prompt: Any  # [P, H]: the prompt's tokens (no padding)
    candidates: Any  # [K, W, H]: each candidate's input tokens (all but its last), right-padded


class Scores(NamedTuple):
    scores: Any  # [B, K] float32: each candidate's summed (or mean) token log-probability
    hidden: Any  # [B, H] float32: the final hidden state of each prompt's last token
    frozen: list[FrozenStates] | None = None  # per prompt, with keep_frozen=True


def score_candidates(
    policy: Any,
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[int]],
    reduction: str = "sum",
    keep_frozen: bool = False,
) -> Scores:
    """Scores of the same `candidates` (token ids, each non-empty) after each of `prompts`
    (token ids); `policy` is an `LlmPolicyModel` (or anything with model, pad_id, autocast,
    frozen_layers). `keep_frozen`: also return each prompt's `FrozenStates`."""
    _check(reduction, len(prompts), candidates)
    decoder, _ = _decoder(policy)
    split = policy.frozen_layers if keep_frozen else None
    prompt_ids, prompt_mask = pad(prompts, policy.pad_id, left=True)
    cand_ids, cand_mask = pad(candidates, policy.pad_id, left=False)
    rows_ids = cand_ids.repeat(len(prompts), 1)  # [B*K, C]: prompt b's candidates, in order
    with policy.autocast():
        embed = decoder.embed_tokens
        return _score(
            policy,
            embed(prompt_ids.to(policy.device)),
            prompt_mask,
            embed(rows_ids[:, :-1].to(policy.device)),
            cand_ids,
            cand_mask,
            start=0,
            split=split,
            reduction=reduction,
        )


def score_from_frozen(
    policy: Any,
    frozen: Sequence[FrozenStates],
    candidates: Sequence[Sequence[int]],
    reduction: str = "sum",
) -> Scores:
    """The scores `score_candidates` gives, from the prompts' `FrozenStates` (the same
    `candidates`): only the layers above `policy.frozen_layers` run."""
    import torch

    _check(reduction, len(frozen), candidates)
    _decoder(policy)  # a clear error for other decoders
    device = policy.device
    # dynamic padding: the minibatch's longest prompt; padded rows are masked (zeros)
    lengths = [int(f.prompt.shape[0]) for f in frozen]
    width, size = max(lengths), int(frozen[0].prompt.shape[1])
    prompt_states = torch.zeros((len(frozen), width, size), dtype=frozen[0].prompt.dtype)
    prompt_mask = torch.zeros((len(frozen), width), dtype=torch.long)
    for i, states in enumerate(frozen):
        prompt_states[i, width - lengths[i] :] = states.prompt
        prompt_mask[i, width - lengths[i] :] = 1
    cand_ids, cand_mask = pad(candidates, policy.pad_id, left=False)
    cand_states = torch.cat([f.candidates for f in frozen])  # [B*K, W, H]
    if cand_states.shape[1] != cand_ids.shape[1] - 1:
        raise ValueError("score_from_frozen: the candidates differ from the ones frozen")
    with policy.autocast():
        return _score(
            policy,
            prompt_states.to(device),
            prompt_mask,
            cand_states.to(device),
            cand_ids,
            cand_mask,
            start=policy.frozen_layers,
            split=None,
            reduction=reduction,
        )


def _check(reduction: str, prompts: int, candidates: Sequence[Sequence[int]]) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: expected one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if not prompts or not candidates or any(not c for c in candidates):
        raise ValueError("score_candidates: needs prompts and non-empty candidates")


def _decoder(policy: Any) -> tuple[Any, Any]:
    """The policy's decoder (its layer stack) and LM head."""
    model = policy.model
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder()
    for part in ("embed_tokens", "layers", "rotary_emb", "norm"):
        if not hasattr(decoder, part):
            raise ValueError(
                f"base_model: the scorer runs Llama-family decoders (embed_tokens, layers, "
                f"rotary_emb, norm); {type(decoder).__name__} has no {part}"
            )
    return decoder, base.get_output_embeddings()


def _score(
    policy: Any,
    prompt_states: Any,
    prompt_mask: Any,
    cand_states: Any,
    cand_ids: Any,
    cand_mask: Any,
    start: int,
    split: int | None,
    reduction: str,
) -> Scores:
    """Both passes from the hidden states entering layer `start`: the prompts' ([B, P, H],
    left-padded as `prompt_mask`) and the candidates' input tokens ([B*K, C-1, H]). `split`:
    also return the states entering layer `split` (the frozen ones)."""
    import torch
    from transformers import DynamicCache

    decoder, lm_head = _decoder(policy)
    device = policy.device
    total = len(decoder.layers)
    batch, count = prompt_mask.shape[0], cand_ids.shape[0]
    cache = DynamicCache(config=decoder.config)

    def run(hidden: Any, mask: Any, positions: Any, stop: int, begin: int) -> Any:
        if begin == stop:
            return hidden
        from transformers.masking_utils import create_causal_mask

        mask = mask.to(device)
        positions = positions.to(device)
        causal = create_causal_mask(
            config=decoder.config,
            inputs_embeds=hidden,
            attention_mask=mask,
            past_key_values=cache,
            position_ids=positions,
            layer_idx=begin,
        )
        rotary = decoder.rotary_emb(hidden, position_ids=positions)
        for layer in decoder.layers[begin:stop]:
            hidden = layer(
                hidden,
                attention_mask=causal,
                position_embeddings=rotary,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
        return hidden

    # 1. the prompts, once each
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = prompt_states
    if split is not None:
        hidden = run(hidden, prompt_mask, positions, split, start)
        kept_prompts = hidden.detach()
        start_top = split
    else:
        start_top = start
    hidden = decoder.norm(run(hidden, prompt_mask, positions, total, start_top))
    last = hidden[:, -1]  # left padding: the last column is real
    first_logprobs = torch.log_softmax(lm_head(last).float(), dim=-1)  # [B, V]

    # 2. every candidate on its prompt's cache
    owner = torch.arange(batch).repeat_interleave(count)  # row r belongs to prompt owner[r]
    cache.reorder_cache(owner.to(device))  # index_select: gradients flow back to pass 1
    width = cand_ids.shape[1]
    rows_ids = cand_ids.repeat(batch, 1)
    rows_mask = cand_mask.repeat(batch, 1)
    prompt_len = prompt_mask.sum(-1)
    cand_positions = prompt_len[owner].unsqueeze(1) + torch.arange(width)
    logprob_first = first_logprobs[owner, rows_ids[:, 0].to(device)]  # [B*K]
    token_logprobs = [logprob_first.unsqueeze(1)]
    kept_candidates = cand_states[:, :0]
    if width > 1:
        mask = torch.cat([prompt_mask[owner], rows_mask[:, :-1]], 1)
        hidden = cand_states
        if split is not None:
            hidden = run(hidden, mask, cand_positions[:, :-1], split, start)
            kept_candidates = hidden.detach()
        hidden = decoder.norm(run(hidden, mask, cand_positions[:, :-1], total, start_top))
        logprobs = torch.log_softmax(lm_head(hidden).float(), dim=-1)
        targets = rows_ids[:, 1:].to(device)
        token_logprobs.append(logprobs.gather(2, targets.unsqueeze(2)).squeeze(2))
    per_token = torch.cat(token_logprobs, 1) * rows_mask.to(device)  # [B*K, C]
    scores = per_token.sum(1)
    if reduction == "mean":
        scores = scores / rows_mask.sum(1).to(device)

    frozen = None
    if split is not None:  # per prompt, its own copies (a view would keep the whole batch)
        lengths = prompt_mask.sum(-1).tolist()
        frozen = [
            FrozenStates(
                kept_prompts[b, kept_prompts.shape[1] - lengths[b] :].float().cpu().clone(),
                kept_candidates[b * count : (b + 1) * count].float().cpu().clone(),
            )
            for b in range(batch)
        ]
    return Scores(scores.view(batch, count), last.float(), frozen)
