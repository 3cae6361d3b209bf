"""KALM's grounded language model: an LLM that reads and writes an environment's numbers.

The grounding does not write numbers as text. A sequence is a list of *items*: text tokens,
and placeholder slots that each carry a whole state or action. A state slot's input embedding
is a linear layer over the (normalised) state, an action slot's an embedding of the discrete
action (or a linear layer over a continuous one); the LLM's last hidden state before a slot
goes through a state head (trained with MSE; `state_target="delta"` makes it predict the change
from the state before it, in normalised units, so that "nothing moved" is the head's zero rather
than something it must learn to copy) or an action head (cross-entropy for discrete
actions, MSE for continuous ones), and a stop head (binary) says where a trajectory ends.
Text items carry the ordinary language-model loss where they are targets.

    model = GroundedLM.create("smollm2", GroundingSpec(state_dim=10, action_size=40), ...)
    loss = model.loss(batch_of_item_lists)                       # grounding SFT (training)
    rollouts = imagine(model, initial_states, instructions)      # llmrl.recipes.kalm.imagine

The four supervised tasks (`task_items`) mixed in training, after the paper:
* `trajectory`: instruction + initial state -> actions and states to the end (stop head);
* `dynamics`:   state + action -> next state;
* `goal`:       instruction + initial state -> final state;
* `describe`:   trajectory -> instruction (the text loss).

`numbers="text"` is the ablation: every state and action is written as text ("[0.12, -0.30,
...]", "a17") and every target falls under the text loss; imagination then decodes text and
parses it. The base LLM is adapted by LoRA (peft); the slot layers and heads are trained whole.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from llmrl.learner.llm.lora import LLAMA_LINEAR_LAYERS, top_layers
from llmrl.learner.llm.model import resolve_base_model

TASKS = ("trajectory", "dynamics", "goal", "describe")
NUMBERS = ("tokens", "text")
STATE_TARGETS = ("absolute", "delta")
GROUNDING_FILE = "grounding.pt"  # slot layers, heads and the state normaliser
SPEC_FILE = "grounding.json"
ADAPTER_DIR = "adapter"

# One item of a sequence: ("text", token ids | str), ("state", vector), ("action", id or
# vector), ("end", None: the stop head's target 1 at the previous position). `train` marks
# the targets: a trained state/action/text is predicted from the hidden state before it.
Item = tuple[str, Any, bool]


TEXT_CACHE_SIZE = 4096  # token ids of recent strings (prompts repeat, numbers rarely)


@dataclass
class GroundingSpec:
    """What the model grounds: the state's size, the actions (`action_size` discrete ids, or
    `action_dim` continuous numbers), and how numbers are carried (`tokens` or `text`)."""

    state_dim: int
    action_size: int | None = None  # discrete actions 0..action_size-1
    action_dim: int | None = None  # continuous actions of this many numbers
    numbers: Literal["tokens", "text"] = "tokens"
    base_model: str = ""
    decimals: int = 2  # numbers-as-text: digits after the point
    base_layers: int | None = None  # keep only the base model's first N decoder layers
    state_target: Literal["absolute", "delta"] = "absolute"  # what the state head predicts

    def __post_init__(self) -> None:
        if (self.action_size is None) == (self.action_dim is None):
            raise ValueError("grounding: give exactly one of action_size (discrete) or action_dim")
        check_number_settings(self.numbers, self.state_target)

    @property
    def discrete(self) -> bool:
        return self.action_size is not None


def check_number_settings(numbers: str, state_target: str) -> None:
    """ValueErrors naming the setting: how numbers are carried, and what the state head
    predicts (a delta needs the head, which numbers=text does not have)."""
    if numbers not in NUMBERS:
        raise ValueError(f"numbers: expected one of {', '.join(NUMBERS)}, got {numbers!r}")
    if state_target not in STATE_TARGETS:
        raise ValueError(
            f"state_target: expected one of {', '.join(STATE_TARGETS)}, got {state_target!r}"
        )
    if state_target == "delta" and numbers == "text":
        raise ValueError(
            "state_target: delta needs the state head (numbers=tokens); with numbers=text "
            "states are written as text"
        )


# -- the four tasks -------------------------------------------------------------------------
def task_items(
    task: str, instruction: str, states: np.ndarray, actions: np.ndarray, rng: random.Random
) -> list[Item]:
    """The items of one training example of `task` from one episode (states: T+1 rows,
    actions: T rows). The prompts are plain English; the slots carry the numbers."""
    if task == "trajectory":
        items: list[Item] = [*trajectory_prompt(instruction), ("state", states[0], False)]
        for t in range(len(actions)):
            items += [("action", actions[t], True), ("state", states[t + 1], True)]
        return [*items, ("end", None, True)]
    if task == "dynamics":
        t = rng.randrange(len(actions))
        return [*dynamics_prompt(states[t], actions[t]), ("state", states[t + 1], True)]
    if task == "goal":
        return [
            ("text", f"Instruction: {instruction}\nInitial state:", False),
            ("state", states[0], False),
            ("text", "\nFinal state:", False),
            ("state", states[-1], True),
        ]
    if task == "describe":
        items = [("text", "Trajectory:", False), ("state", states[0], False)]
        for t in range(len(actions)):
            items += [("action", actions[t], False), ("state", states[t + 1], False)]
        return [*items, ("text", "\nInstruction:", False), ("text", f" {instruction}\n", True)]
    raise ValueError(f"unknown grounding task {task!r}; tasks: {', '.join(TASKS)}")


def dynamics_prompt(state: Any, action: Any) -> list[Item]:
    """The `dynamics` task's items up to the next state the model predicts."""
    return [
        ("text", "Dynamics. State:", False),
        ("state", state, False),
        ("text", " Action:", False),
        ("action", action, False),
        ("text", " Next state:", False),
    ]


def trajectory_prompt(instruction: str) -> list[Item]:
    return [("text", f"Instruction: {instruction}\nTrajectory:", False)]


def episode_arrays(episode: Any) -> tuple[np.ndarray, np.ndarray]:
    """(states T+1, actions T) of an `OfflineDataset` episode: its observations and, where the
    dataset has it, its final observation (else the last action is dropped)."""
    observations = np.asarray(episode.observations, np.float32)
    actions = np.asarray(episode.actions)
    final = getattr(episode, "final_observation", None)
    if final is not None:
        return np.concatenate([observations, np.asarray(final, np.float32)[None]]), actions
    return observations, actions[:-1]


def keep_first_layers(lm: Any, count: int) -> None:
    """Cut a decoder-only model to its first `count` layers (a cheaper LM on a small CPU)."""
    layers = lm.model.layers
    if not 1 <= count <= len(layers):
        raise ValueError(f"base_layers: must be in [1, {len(layers)}] for this model, got {count}")
    lm.model.layers = layers[:count]
    lm.config.num_hidden_layers = count
    if getattr(lm.config, "layer_types", None):
        lm.config.layer_types = lm.config.layer_types[:count]


# -- the model ------------------------------------------------------------------------------
class GroundedLM:
    """A causal LM with LoRA, slot input layers and output heads (`modules`, an nn.ModuleDict:
    `state_in`, `action_in`, `state_out`, `action_out`, `stop_out`; buffers `state_mean`,
    `state_std` in `norm`)."""

    def __init__(self, lm: Any, tokenizer: Any, modules: Any, spec: GroundingSpec) -> None:
        self.lm, self.tokenizer, self.modules, self.spec = lm, tokenizer, modules, spec
        self._text_cache: dict[str, list[int]] = {}

    # -- building and files -----------------------------------------------------------------
    @classmethod
    def create(
        cls,
        base_model: str,
        spec: GroundingSpec,
        *,
        lora_r: int = 16,
        lora_layers: int | None = None,
        states: np.ndarray | None = None,
        adapter_dir: str | Path | None = None,
        device: str = "auto",
    ) -> GroundedLM:
        """The base model with a fresh LoRA (or the one in `adapter_dir`), fresh slot layers
        and heads; the state normaliser from `states` (rows of states seen in training); all
        on `device` (`auto`: the GPU where torch sees one)."""
        import torch
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from llmrl.common.devices import resolve_device

        where = resolve_device(device)
        directory = resolve_base_model(base_model)
        spec.base_model = spec.base_model or base_model
        tokenizer = AutoTokenizer.from_pretrained(directory)
        lm = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
        if spec.base_layers is not None:
            keep_first_layers(lm, spec.base_layers)
        if adapter_dir is not None:
            lm = PeftModel.from_pretrained(lm, str(adapter_dir), is_trainable=True)
        else:
            config = LoraConfig(
                r=lora_r,
                lora_alpha=2 * lora_r,
                lora_dropout=0.0,
                target_modules=list(LLAMA_LINEAR_LAYERS),
                layers_to_transform=top_layers(lm, lora_layers),
                task_type="CAUSAL_LM",
            )
            lm = get_peft_model(lm, config)
        hidden = int(lm.config.hidden_size)
        nn = torch.nn
        if spec.discrete:
            action_in: Any = nn.Embedding(int(spec.action_size), hidden)
            action_out: Any = nn.Linear(hidden, int(spec.action_size))
        else:
            action_in = nn.Linear(int(spec.action_dim), hidden)
            action_out = nn.Linear(hidden, int(spec.action_dim))
        modules = nn.ModuleDict(
            {
                "state_in": nn.Linear(spec.state_dim, hidden),
                "action_in": action_in,
                "state_out": nn.Linear(hidden, spec.state_dim),
                "action_out": action_out,
                "stop_out": nn.Linear(hidden, 1),
                "norm": make_normaliser(spec.state_dim),
            }
        )
        scale = float(lm.get_input_embeddings().weight.detach().std())
        with torch.no_grad():  # slot embeddings on the scale of the token embeddings
            for name in ("state_in", "action_in"):
                modules[name].weight.normal_(0.0, scale)
        if states is not None:
            modules["norm"].fit(np.asarray(states, np.float32))
        return cls(lm.to(where), tokenizer, modules.to(where), spec)

    def save(self, directory: Path) -> None:
        import torch

        directory.mkdir(parents=True, exist_ok=True)
        self.lm.save_pretrained(directory / ADAPTER_DIR)
        torch.save(self.modules.state_dict(), directory / GROUNDING_FILE)
        (directory / SPEC_FILE).write_text(json.dumps(asdict(self.spec), indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | Path, device: str = "auto") -> GroundedLM:
        import torch

        directory = Path(directory)
        spec_file = directory / SPEC_FILE
        if not spec_file.is_file():
            raise FileNotFoundError(f"checkpoint: no grounded model ({SPEC_FILE}) in {directory}")
        try:
            spec = GroundingSpec(**json.loads(spec_file.read_text()))
        except (TypeError, ValueError) as exc:  # another version's file, or not JSON
            raise ValueError(f"checkpoint: {spec_file} is not a grounding spec: {exc}") from None
        model = cls.create(
            spec.base_model, spec, adapter_dir=directory / ADAPTER_DIR, device=device
        )
        state = torch.load(directory / GROUNDING_FILE, map_location="cpu", weights_only=True)
        model.modules.load_state_dict(state)
        return model

    # -- pieces -----------------------------------------------------------------------------
    def parameters(self) -> list[Any]:
        return [p for p in self.lm.parameters() if p.requires_grad] + [
            p for p in self.modules.parameters() if p.requires_grad
        ]

    def train(self, mode: bool = True) -> GroundedLM:
        self.lm.train(mode)
        self.modules.train(mode)
        return self

    @property
    def device(self) -> Any:
        """Where the model runs: every tensor it builds is made there."""
        return next(self.lm.parameters()).device

    @property
    def causal_lm(self) -> Any:
        """The transformers causal LM inside the peft wrapper (LoRA layers injected)."""
        return self.lm.get_base_model()

    def text_ids(self, text: str) -> list[int]:
        """Token ids of `text`; cached, but bounded: with numbers as text nearly every
        state is a new string, and an unbounded cache would grow with every step."""
        cached = self._text_cache.get(text)
        if cached is None:
            cached = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._text_cache) >= TEXT_CACHE_SIZE:
                self._text_cache.pop(next(iter(self._text_cache)))  # the oldest entry
            self._text_cache[text] = cached
        return cached

    def number_text(self, kind: str, value: Any) -> str:
        """The numbers-as-text rendering of a state or action."""
        if kind == "action" and self.spec.discrete:
            return f" a{int(value)}"
        numbers = ", ".join(f"{float(x):.{self.spec.decimals}f}" for x in np.ravel(value))
        return f" [{numbers}]"

    def as_text_items(self, items: Sequence[Item]) -> list[Item]:
        """The numbers-as-text form of `items`: slots become text, `end` the text " end"."""
        out: list[Item] = []
        for kind, value, train in items:
            if kind in ("state", "action"):
                out.append(("text", self.number_text(kind, value), train))
            elif kind == "end":
                out.append(("text", " end", train))
            else:
                out.append((kind, value, train))
        return out

    # -- forward --------------------------------------------------------------------------------
    def embed(self, batch: Sequence[Sequence[Item]]) -> tuple[Any, Any, list[dict[str, list]]]:
        """(inputs_embeds (B, L, H) right-padded, attention mask (B, L), targets per row:
        lists of (position predicting, target) for state/action/stop/text)."""
        import torch

        embedding = self.lm.get_input_embeddings()
        device = self.device
        rows, targets = [], []
        for items in batch:
            if self.spec.numbers == "text":
                items = self.as_text_items(items)
            pieces, found = [], {"state": [], "action": [], "stop": [], "text": []}
            length, previous = 0, None  # the last state slot's normalised vector
            for kind, value, train in items:
                if kind == "text":
                    ids = self.text_ids(value) if isinstance(value, str) else list(value)
                    pieces.append(embedding(torch.tensor(ids, dtype=torch.long, device=device)))
                    if train:
                        found["text"] += [(length + i - 1, tok) for i, tok in enumerate(ids)]
                    length += len(ids)
                elif kind == "state":
                    vector = torch.as_tensor(np.asarray(value, np.float32), device=device)
                    normalised = self.modules["norm"](vector)
                    pieces.append(self.modules["state_in"](normalised)[None])
                    if train:
                        target = self._state_target(normalised, previous)
                        found["state"].append((length - 1, target))
                    previous = normalised
                    length += 1
                elif kind == "action":
                    pieces.append(self._action_embedding(value))
                    if train:
                        found["action"].append((length - 1, value))
                        found["stop"].append((length - 1, 0.0))
                    length += 1
                elif kind == "end":
                    if train:
                        found["stop"].append((length - 1, 1.0))
                else:
                    raise ValueError(f"unknown item kind {kind!r}")
            rows.append(torch.cat(pieces, dim=0))
            targets.append(found)
        width = max(len(r) for r in rows)
        hidden = rows[0].shape[1]
        embeds = rows[0].new_zeros((len(rows), width, hidden))
        mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for i, row in enumerate(rows):
            embeds[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return embeds, mask, targets

    def _state_target(self, normalised: Any, previous: Any) -> Any:
        if self.spec.state_target == "absolute":
            return normalised
        if previous is None:
            raise ValueError("state_target=delta: a trained state needs a state before it")
        return normalised - previous

    def state_slot(self, states: np.ndarray) -> Any:
        """Input embeddings (N, H) of state slots for states (N, state_dim)."""
        import torch

        vectors = torch.as_tensor(np.asarray(states, np.float32), device=self.device)
        return self.modules["state_in"](self.modules["norm"](vectors))

    def action_slot(self, value: Any) -> Any:
        """The input embedding (1, H) of one action's slot."""
        return self._action_embedding(value)

    def _action_embedding(self, value: Any) -> Any:
        import torch

        if self.spec.discrete:
            index = torch.tensor([int(value)], dtype=torch.long, device=self.device)
            return self.modules["action_in"](index)
        vector = torch.as_tensor(np.asarray(value, np.float32), device=self.device)
        return self.modules["action_in"](vector)[None]

    def hidden(self, embeds: Any, mask: Any) -> Any:
        """The last layer's hidden states (B, L, H)."""
        out = self.causal_lm.model(inputs_embeds=embeds, attention_mask=mask)
        return out.last_hidden_state

    def loss(
        self, batch: Sequence[Sequence[Item]], weights: dict[str, float] | None = None
    ) -> tuple[Any, dict[str, float]]:
        """The weighted sum of the mean losses of every target in the batch (`weights` per
        loss name, 1 where not given), and each loss's unweighted value."""
        import torch
        import torch.nn.functional as F

        embeds, mask, targets = self.embed(batch)
        hidden = self.hidden(embeds, mask)
        device = hidden.device
        losses: dict[str, Any] = {}

        def gather(kind: str) -> tuple[Any, list[Any]]:
            index = [(row, pos) for row, t in enumerate(targets) for pos, _ in t[kind]]
            values = [value for t in targets for _, value in t[kind]]
            if not index:
                return None, []
            rows_, positions = zip(*index, strict=True)
            return hidden[list(rows_), list(positions)], values

        h, values = gather("state")
        if h is not None:
            losses["state"] = F.mse_loss(self.modules["state_out"](h), torch.stack(values))
        h, values = gather("action")
        if h is not None:
            logits = self.modules["action_out"](h)
            if self.spec.discrete:
                wanted = torch.tensor([int(v) for v in values], device=device)
                losses["action"] = F.cross_entropy(logits, wanted)
            else:
                wanted = torch.as_tensor(np.asarray(values, np.float32), device=device)
                losses["action"] = F.mse_loss(logits, wanted)
        h, values = gather("stop")
        if h is not None:
            logit = self.modules["stop_out"](h).squeeze(-1)
            wanted = torch.tensor(values, device=device)
            losses["stop"] = F.binary_cross_entropy_with_logits(logit, wanted)
        h, values = gather("text")
        if h is not None:
            logits = self.causal_lm.lm_head(h)
            losses["text"] = F.cross_entropy(logits.float(), torch.tensor(values, device=device))
        weights = weights or {}
        total = sum(float(weights.get(name, 1.0)) * value for name, value in losses.items())
        return total, {k: float(v.detach()) for k, v in losses.items()}

    # -- predictions at the end of each row (imagination) -----------------------------------
    def last_hidden(self, batch: Sequence[Sequence[Item]]) -> Any:
        """The hidden state at each row's last position (B, H)."""
        import torch

        embeds, mask, _ = self.embed(batch)
        hidden = self.hidden(embeds, mask)
        last = mask.sum(dim=1) - 1
        return hidden[torch.arange(len(batch), device=hidden.device), last]

    def predict_state(self, hidden: Any, previous: np.ndarray | None = None) -> np.ndarray:
        """The states (N, state_dim) the head predicts from hidden states (N, H); with
        `state_target="delta"`, as changes from `previous` (N, state_dim), which it needs."""
        import torch

        normalised = self.modules["state_out"](hidden)
        if self.spec.state_target == "delta":
            if previous is None:
                raise ValueError("state_target=delta: predict_state needs the previous states")
            before = torch.as_tensor(np.asarray(previous, np.float32), device=self.device)
            normalised = normalised + self.modules["norm"](before)
        return self.modules["norm"].inverse(normalised).detach().cpu().numpy()

    def predict_action(
        self, hidden: Any, temperature: float = 0.0, generator: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(actions, stop probabilities) from the hidden states before an action: the action
        head's argmax, or with `temperature` > 0 (discrete actions only) a draw from the
        softmax of its logits / temperature (`generator`: a seeded torch.Generator)."""
        import torch

        logits = self.modules["action_out"](hidden)
        stop = torch.sigmoid(self.modules["stop_out"](hidden).squeeze(-1)).detach().cpu().numpy()
        if temperature > 0 and not self.spec.discrete:
            raise ValueError(
                "temperature: sampling applies to discrete actions; a Box action is the head's "
                "regression (use temperature 0)"
            )
        if not self.spec.discrete:
            return logits.detach().cpu().numpy(), stop
        if temperature <= 0:
            return logits.argmax(-1).detach().cpu().numpy(), stop
        probs = torch.softmax(logits.detach().float().cpu() / temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1).numpy(), stop


@functools.cache
def _normaliser_class() -> Any:
    import torch

    class Normaliser(torch.nn.Module):
        """States to zero mean and unit spread per coordinate (statistics from the data)."""

        def __init__(self, dim: int) -> None:
            super().__init__()
            self.register_buffer("mean", torch.zeros(dim))
            self.register_buffer("std", torch.ones(dim))

        def fit(self, states: np.ndarray) -> None:
            self.mean.copy_(torch.as_tensor(states.mean(axis=0)))
            self.std.copy_(torch.as_tensor(np.maximum(states.std(axis=0), 1e-3)))

        def forward(self, x: Any) -> Any:
            return (x - self.mean) / self.std

        def inverse(self, x: Any) -> Any:
            return x * self.std + self.mean

    return Normaliser


def make_normaliser(dim: int) -> Any:
    return _normaliser_class()(dim)
