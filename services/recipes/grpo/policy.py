"""GRPO's LLM policy: one BabyAI-Text episode as one growing transcript, an action phrase per turn.

The transcript is GLAM's prompt (`llmrl.recipes.glam.prompt`) without its three-observation
window, since TRL scores one episode as one sequence (the prompt, then everything after it as
the "completion"):

    Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle
    Goal of the agent: go to the red ball
    Observation 0: You see a wall 2 steps forward, You see a red ball 1 step left
    Action 0: turn left                                          <- generated (mask 1)
    Observation 1: You see a red ball 1 step forward             <- the env's (mask 0)
    Action 1: go forward                                         <- generated
    ...

The prompt runs to the first "Action 0:"; each turn the policy generates " <phrase>\\n" and the
env's reply "Observation i: ...\\nAction i:" follows. Token ids are built by concatenating the
pieces' own encodings (never re-tokenizing the whole text), so the ids TRL trains on are
exactly the ids the policy generated from.

Decoding is **constrained** to the env's legal phrases: at each generated token the logits are
masked to the continuations of a token trie over " <phrase>\\n" (softmax over the allowed
tokens, then sampled, or the argmax when greedy). An invalid phrase therefore cannot occur in
this decoding, so none needs a no-op or a penalty; the sampling log-probs returned to TRL are
the masked ones (what was actually sampled from). The trained model sees the full-vocabulary
log-probs in TRL's loss, so GRPO raises the unmasked probability of rewarded phrases too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmrl.recipes.glam.prompt import glam_prompt, observation_sentence


def observation_chunk(index: int, text: str) -> str:
    """What the env adds after turn `index - 1`'s phrase: its next observation, an open action."""
    return f"Observation {index}: {observation_sentence(text)}\nAction {index}:"


def header(phrases: Sequence[str], mission: str, text: str) -> str:
    """The episode's prompt: GLAM's, up to the open "Action 0:"."""
    return glam_prompt(phrases, mission, [observation_sentence(text)], [])


class PhraseTrie:
    """The token sequences of " <phrase>\\n" for each legal phrase, walked token by token."""

    def __init__(self, tokenizer: Any, phrases: Sequence[str]) -> None:
        self.phrases = tuple(phrases)
        self.sequences = [
            tuple(tokenizer.encode(f" {p}\n", add_special_tokens=False)) for p in self.phrases
        ]
        if len(set(self.sequences)) != len(self.sequences):
            raise ValueError(f"phrases {self.phrases} do not tokenize to distinct sequences")

    def allowed(self, prefix: Sequence[int]) -> list[int]:
        """The tokens that continue `prefix` towards some phrase (empty: a phrase is complete)."""
        n = len(prefix)
        prefix = tuple(prefix)
        return sorted({s[n] for s in self.sequences if len(s) > n and s[:n] == prefix})

    def phrase(self, tokens: Sequence[int]) -> str | None:
        """The phrase `tokens` spell completely, else None."""
        tokens = tuple(tokens)
        for phrase, sequence in zip(self.phrases, self.sequences, strict=True):
            if sequence == tokens:
                return phrase
        return None


@dataclass
class Turn:
    """One generated phrase: its tokens, their sampling log-probs, the prompt it was read from."""

    phrase: str
    tokens: list[int]
    logprobs: list[float]
    context_tokens: int  # tokens the model read before generating it (the call's prompt)


@dataclass
class Transcript:
    """One episode's token ids: the prompt, then the completion (generated and env tokens)
    with its mask (1: generated) and sampling log-probs (0 at env tokens)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def add_generated(self, turn: Turn) -> None:
        self.completion_ids += turn.tokens
        self.mask += [1] * len(turn.tokens)
        self.logprobs += turn.logprobs

    def add_env(self, tokens: Sequence[int]) -> None:
        self.completion_ids += list(tokens)
        self.mask += [0] * len(tokens)
        self.logprobs += [0.0] * len(tokens)

    def context(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


class PhrasePolicy:
    """Plays one episode turn by turn from a causal LM (a PEFT model or a plain one), keeping
    its KV cache across turns so each turn computes only its new tokens."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        phrases: Sequence[str],
        *,
        greedy: bool,
        temperature: float,
        generator: Any,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.trie = PhraseTrie(tokenizer, phrases)
        self.greedy, self.temperature, self.generator = greedy, temperature, generator
        self.transcript: Transcript | None = None
        self._cache: Any = None
        self._fed = 0  # tokens of the transcript already in the cache
        self._turns = 0

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def start(self, phrases: Sequence[str], mission: str, text: str) -> None:
        """A new episode: the transcript is its prompt (and the cache is emptied)."""
        self.transcript = Transcript(prompt_ids=self.encode(header(phrases, mission, text)))
        self._cache, self._fed, self._turns = None, 0, 0

    def observe(self, text: str) -> None:
        """The env's reply to the last phrase: the next observation and the open action line."""
        assert self.transcript is not None
        self._turns += 1
        self.transcript.add_env(self.encode(observation_chunk(self._turns, text)))

    def _logits(self, new: list[int]) -> Any:
        import torch

        ids = torch.tensor([new], dtype=torch.long)
        out = self.model(input_ids=ids, past_key_values=self._cache, use_cache=True)
        self._cache = out.past_key_values
        self._fed += len(new)
        return out.logits[0, -1].float()

    def act(self) -> Turn:
        """Generate the next phrase, constrained to the legal ones (see the module's doc)."""
        import torch

        assert self.transcript is not None
        context = self.transcript.context()
        context_tokens = len(context)
        tokens: list[int] = []
        logprobs: list[float] = []
        with torch.no_grad():
            logits = self._logits(context[self._fed :])
            while allowed := self.trie.allowed(tokens):
                scores = logits[allowed] / (1.0 if self.greedy else self.temperature)
                logp = torch.log_softmax(scores, dim=-1)
                if self.greedy or len(allowed) == 1:
                    choice = int(torch.argmax(logp))
                else:
                    choice = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
                tokens.append(allowed[choice])
                logprobs.append(float(logp[choice]))
                logits = self._logits([tokens[-1]])
        phrase = self.trie.phrase(tokens)
        assert phrase is not None  # the trie only completes legal phrases
        turn = Turn(phrase, tokens, logprobs, context_tokens)
        self.transcript.add_generated(turn)
        return turn


def load_policy_model(
    base: str, adapter: str | None, dtype: str, device: str = "cpu"
) -> tuple[Any, Any]:
    """The base model (a local directory or a hub name), with `adapter` (a PEFT adapter
    directory) on top when given, in `dtype`, for evaluation; and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmrl.common.devices import resolve_device

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype))
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    return model.to(resolve_device(device)).eval(), tokenizer  # a GPU: its numerics pinned
