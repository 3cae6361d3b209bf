"""Imagined rollouts: a grounded LM (`llmrl.recipes.kalm.grounded_lm`) writes the trajectory an
instruction asks for, from a real initial state, one action and one state at a time.

    rollouts = imagine(model, initial_states, instructions, max_steps=10)
    kept, share = filter_rollouts(rollouts, valid_state)      # the env's validity check
    rate = goal_match_rate(kept, goals, success)              # the env's success function
    kept, share = select_rollouts(rollouts, valid_state, "goal", goals, success)  # both

Continuous (Box) actions are clipped to the Box (`action_bounds`), as the env would clip them:
with slots, each step's action (the action head's regression) is clipped before the model
reads it back; with numbers as text, the whole rollout is generated first and only the stored
actions are clipped (the model conditioned on the unclipped text it wrote).

With slots (`numbers="tokens"`), each step reads the stop head and the action head at the
last state (greedy, KALM's; with `temperature` > 0 a discrete action is drawn from the head's
softmax at that temperature, seeded, so one instruction from one start can be imagined many
ways), appends the action's slot, then reads the state head there and appends
the predicted state. With numbers as text, the LM generates the rest of the trajectory as text
(greedy) and it is parsed; text that does not parse ends the rollout there, and a state with
the wrong count of numbers makes the rollout invalid (NaN), so the filter drops it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmrl.recipes.kalm.grounded_lm import GroundedLM, trajectory_prompt


@dataclass
class Rollout:
    """One imagined trajectory: states (T+1, state_dim), actions (T,) or (T, act_dim), and
    whether the model ended it (stop head, or " end" in text) before `max_steps`."""

    states: np.ndarray
    actions: np.ndarray
    stopped: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def final_state(self) -> np.ndarray:
        return self.states[-1]


def imagine(
    model: GroundedLM,
    initial_states: np.ndarray,
    instructions: Sequence[str],
    *,
    max_steps: int = 10,
    batch_size: int = 32,
    action_bounds: tuple[Any, Any] | None = None,
    on_progress: Callable[[int], None] | None = None,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[Rollout]:
    """One rollout per (initial state, instruction), in order; continuous actions clipped to
    `action_bounds` (low, high: numbers or arrays of the action's size); discrete actions
    drawn at `temperature` (0: greedy) from a generator seeded by `seed`."""
    import torch

    for name, value in (("batch_size", batch_size), ("max_steps", max_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature: expected a number >= 0 (0: greedy), got {temperature!r}")
    if temperature > 0 and (model.spec.numbers == "text" or not model.spec.discrete):
        raise ValueError(
            "temperature: sampled imagination needs discrete actions in slots "
            "(numbers=tokens); use temperature 0"
        )
    generator = torch.Generator().manual_seed(int(seed))
    if len(initial_states) != len(instructions):
        raise ValueError(
            f"initial_states ({len(initial_states)}) and instructions ({len(instructions)}) "
            "must have one row each per rollout"
        )
    rollouts: list[Rollout] = []
    with torch.no_grad():
        for start in range(0, len(instructions), batch_size):
            states = np.asarray(initial_states[start : start + batch_size], np.float32)
            texts = list(instructions[start : start + batch_size])
            if model.spec.numbers == "text":
                rollouts += _imagine_text(model, states, texts, max_steps, action_bounds)
            else:
                rollouts += _imagine_slots(
                    model, states, texts, max_steps, action_bounds, temperature, generator
                )
            if on_progress is not None:
                on_progress(len(texts))
    return rollouts


def _clip(actions: np.ndarray, bounds: tuple[Any, Any] | None) -> np.ndarray:
    """Continuous actions clipped to the Box (discrete ids and no bounds: unchanged)."""
    if bounds is None or actions.dtype.kind in "iu":
        return actions
    return np.clip(actions, bounds[0], bounds[1]).astype(np.float32)


def _imagine_slots(
    model: GroundedLM,
    initial: np.ndarray,
    instructions: list[str],
    max_steps: int,
    action_bounds: tuple[Any, Any] | None = None,
    temperature: float = 0.0,
    generator: Any = None,
) -> list[Rollout]:
    """Every row advances in lockstep, one slot at a time, on the LM's key/value cache: the
    prompts are left-padded, so each new slot is one position further in every row."""
    import torch

    prompts = [
        [*trajectory_prompt(text), ("state", s, False)]
        for text, s in zip(instructions, initial, strict=True)
    ]
    embeds, mask, _ = model.embed(prompts)
    lengths = mask.sum(dim=1)
    width = embeds.shape[1]
    for i, length in enumerate(lengths.tolist()):  # right padding -> left padding
        embeds[i] = torch.roll(embeds[i], width - length, dims=0)
        mask[i] = torch.roll(mask[i], width - length, dims=0)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    backbone = model.causal_lm.model
    out = backbone(
        inputs_embeds=embeds, attention_mask=mask, position_ids=positions, use_cache=True
    )

    def advance(slot: Any) -> Any:
        nonlocal out, mask, positions
        mask = torch.cat([mask, mask.new_ones((len(mask), 1))], dim=1)
        positions = positions[:, -1:] + 1
        out = backbone(
            inputs_embeds=slot,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=out.past_key_values,
            use_cache=True,
        )
        return out.last_hidden_state[:, -1]

    hidden = out.last_hidden_state[:, -1]
    states = [[s] for s in initial]
    actions: list[list[Any]] = [[] for _ in instructions]
    stopped = np.zeros(len(instructions), bool)
    current = np.asarray(initial, np.float32)  # every row's last state slot (delta heads)
    for t in range(max_steps):
        chosen, stop = model.predict_action(hidden, temperature, generator)
        chosen = _clip(chosen, action_bounds)
        if t > 0:  # at least one step: an empty rollout teaches nothing
            stopped |= stop > 0.5
        if stopped.all():
            break
        for i in np.flatnonzero(~stopped):
            actions[i].append(chosen[i])
        slots = torch.cat([model.action_slot(a) for a in chosen])[:, None]
        hidden = advance(slots)
        predicted = current = model.predict_state(hidden, current)
        for i in np.flatnonzero(~stopped):
            states[i].append(predicted[i])
        hidden = advance(model.state_slot(predicted)[:, None])
    empty = np.zeros((0,) if model.spec.discrete else (0, int(model.spec.action_dim or 0)))
    return [
        Rollout(np.stack(s).astype(np.float32), np.asarray(a) if a else empty, bool(done))
        for s, a, done in zip(states, actions, stopped, strict=True)
    ]


_NUMBER_LIST = re.compile(r"\[([^\]]*)\]")


def _imagine_text(
    model: GroundedLM,
    initial: np.ndarray,
    instructions: list[str],
    max_steps: int,
    action_bounds: tuple[Any, Any] | None = None,
) -> list[Rollout]:
    import torch

    tokenizer = model.tokenizer
    prompts = [
        "".join(v for _, v, _ in model.as_text_items([*trajectory_prompt(t), ("state", s, False)]))
        for t, s in zip(instructions, initial, strict=True)
    ]
    encoded = [model.text_ids(p) for p in prompts]
    width = max(len(e) for e in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=model.device)
    mask = torch.tensor(
        [[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=input_ids.device
    )
    per_step = 8 * model.spec.state_dim + 8  # generous: numbers of a state plus an action
    output = model.lm.generate(
        input_ids=input_ids,
        attention_mask=mask,
        max_new_tokens=max_steps * per_step,
        do_sample=False,
        pad_token_id=pad,
    )
    texts = tokenizer.batch_decode(output[:, width:], skip_special_tokens=True)
    rollouts = [
        parse_text_rollout(
            text, s, model.spec.state_dim, max_steps, model.spec.discrete, model.spec.action_dim
        )
        for text, s in zip(texts, initial, strict=True)
    ]
    for rollout in rollouts:
        rollout.actions = _clip(rollout.actions, action_bounds)
    return rollouts


def parse_text_rollout(
    text: str,
    initial: np.ndarray,
    state_dim: int,
    max_steps: int,
    discrete: bool = True,
    action_dim: int | None = None,
) -> Rollout:
    """A rollout from generated text " a3 [x, y, ...] a17 [...] end" (continuous actions:
    " [a, b, c, d] [x, y, ...]"); parsing stops at the first piece that is not an action
    followed by a state. A continuous action of the wrong size (not `action_dim` numbers) is
    NaN, which the filter drops."""
    states, actions = [np.asarray(initial, np.float32)], []
    pattern = r"\s*a(\d+)\s*" if discrete else r"\s*(\[[^\]]*\])\s*"
    step = re.compile(pattern + r"\[([^\]]*)\]")
    position, stopped = 0, False
    while len(actions) < max_steps:
        if text[position:].lstrip().startswith("end"):
            stopped = True
            break
        match = step.match(text, position)
        if match is None:
            break
        action_text, state_text = match.group(1), match.group(2)
        action: Any = int(action_text) if discrete else _numbers(action_text.strip("[]"))
        if not discrete and action_dim is not None and len(action) != action_dim:
            action = np.full(action_dim, np.nan, np.float32)
        state = _numbers(state_text)
        if len(state) != state_dim:
            state = np.full(state_dim, np.nan, np.float32)  # the filter drops the rollout
        actions.append(action)
        states.append(state)
        position = match.end()
    return Rollout(np.stack(states), np.asarray(actions), stopped, {"text": text})


def _numbers(text: str) -> np.ndarray:
    try:
        return np.asarray([float(x) for x in text.split(",") if x.strip()], np.float32)
    except ValueError:
        return np.asarray([np.nan], np.float32)


def filter_rollouts(
    rollouts: Sequence[Rollout], valid_state: Callable[[np.ndarray], bool]
) -> tuple[list[int], float]:
    """Indices of the rollouts whose every state is valid (finite, on the table, no overlap:
    the env's `valid_state`), whose actions are finite, and that take at least one action;
    and their share."""
    kept = [
        i
        for i, rollout in enumerate(rollouts)
        if len(rollout.actions) > 0
        and np.isfinite(np.asarray(rollout.actions, np.float64)).all()
        and all(np.isfinite(s).all() and valid_state(s) for s in rollout.states)
    ]
    return kept, (len(kept) / len(rollouts) if rollouts else 0.0)


FILTERS = ("valid", "goal")


def select_rollouts(
    rollouts: Sequence[Rollout],
    valid_state: Callable[[np.ndarray], bool],
    mode: str = "valid",
    goals: Sequence[Any] | None = None,
    success: Callable[[np.ndarray, Any], bool] | None = None,
) -> tuple[list[int], float]:
    """The rollouts an imagined dataset keeps, and their share: `valid` as `filter_rollouts`;
    `goal` also drops the valid ones that never meet their goal (`reaches_goal`; one goal per
    rollout)."""
    if mode not in FILTERS:
        raise ValueError(f"imagined_filter: expected one of {', '.join(FILTERS)}, got {mode!r}")
    kept, share = filter_rollouts(rollouts, valid_state)
    if mode == "valid":
        return kept, share
    if goals is None or success is None:
        raise ValueError("imagined_filter: goal needs each rollout's goal and a success function")
    kept = [i for i in kept if reaches_goal(rollouts[i], goals[i], success)]
    return kept, (len(kept) / len(rollouts) if rollouts else 0.0)


def reaches_goal(rollout: Rollout, goal: Any, success: Callable[[np.ndarray, Any], bool]) -> bool:
    """Whether any state after the first meets `goal`: an imagined dataset cuts a rollout at
    that step and labels it a success, even when a later state leaves the goal again."""
    return any(success(state, goal) for state in rollout.states[1:])


def goal_match_rate(
    rollouts: Sequence[Rollout],
    goals: Sequence[Any],
    success: Callable[[np.ndarray, Any], bool],
) -> float:
    """The share of rollouts whose imagined final state satisfies their goal."""
    if not rollouts:
        return 0.0
    hits = [bool(success(r.final_state, g)) for r, g in zip(rollouts, goals, strict=True)]
    return float(np.mean(hits))
