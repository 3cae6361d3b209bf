"""DRRN (He et al., ACL 2016): a Q-network over a text state and text actions, as a
Stable-Baselines3 DQN policy (GLAM's DRRN baseline, `drrn.py`).

Q(s, a) scores one (state, action phrase) pair: a GRU encodes the state's words, another GRU
each action phrase's words, and a hidden ReLU layer over the two codes gives the value (the
form of GLAM's DRRN baseline, after Microsoft's TDQN code). The phrases are part of the
observation, so the same network scores whatever phrases an env offers (a variant's synonyms).

Observation layout (one float32 row of word ids, what SB3's replay buffer stores):

    [state: `state_words` ids][phrase 0: `phrase_words` ids] ... [phrase A-1: `phrase_words` ids]

Words are lower-cased letter or digit runs; a word's id is 1 + crc32(word) mod (vocab - 1)
(0 pads): a fixed hashing vocabulary, so unseen words (invented nouns, French) get ids without
a vocabulary file, sharing them with other words now and then. DQN (target network, Huber
loss, epsilon-greedy exploration, replay) is SB3's.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import nn

_WORD = re.compile(r"[^\W\d_]+|\d+")


@dataclass(frozen=True)
class DrrnLayout:
    """Sizes of the observation row and of the network."""

    state_words: int = 128
    phrase_words: int = 6
    actions: int = 6
    vocab: int = 4096
    embedding_dim: int = 128
    hidden_dim: int = 128

    def __post_init__(self) -> None:
        for key, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"drrn.{key}: expected a positive integer, got {value!r}")
        if self.vocab < 2:
            raise ValueError(f"drrn.vocab: expected at least 2 (0 pads), got {self.vocab}")

    @property
    def size(self) -> int:
        return self.state_words + self.actions * self.phrase_words

    def observation_space(self) -> spaces.Box:
        return spaces.Box(0.0, float(self.vocab - 1), (self.size,), np.float32)


def word_ids(text: str, vocab: int) -> list[int]:
    """The words of `text` as hashed ids in [1, vocab)."""
    return [1 + zlib.crc32(w.encode()) % (vocab - 1) for w in _WORD.findall(text.lower())]


def encode(layout: DrrnLayout, head: str, body: str, phrases: Sequence[str]) -> np.ndarray:
    """One observation row: the state is `head`'s words (kept first: GLAM's goal) then
    `body`'s most recent words (the history), cut to `state_words`; then each phrase."""
    if len(phrases) != layout.actions:
        raise ValueError(f"phrases: expected {layout.actions}, got {len(phrases)}")
    row = np.zeros(layout.size, np.float32)
    state = word_ids(head, layout.vocab)[: layout.state_words]
    room = layout.state_words - len(state)
    body_ids = word_ids(body, layout.vocab)
    state += body_ids[len(body_ids) - room :] if room > 0 else []
    row[: len(state)] = state
    for i, phrase in enumerate(phrases):
        ids = word_ids(phrase, layout.vocab)[: layout.phrase_words]
        start = layout.state_words + i * layout.phrase_words
        row[start : start + len(ids)] = ids
    return row


class DrrnScorer(nn.Module):
    """Q-values [B, A] from observation rows [B, size] (module docstring)."""

    def __init__(self, layout: DrrnLayout) -> None:
        super().__init__()
        self.layout = layout
        self.embedding = nn.Embedding(layout.vocab, layout.embedding_dim, padding_idx=0)
        self.state_encoder = nn.GRU(layout.embedding_dim, layout.hidden_dim, batch_first=True)
        self.action_encoder = nn.GRU(layout.embedding_dim, layout.hidden_dim, batch_first=True)
        self.hidden = nn.Linear(2 * layout.hidden_dim, layout.hidden_dim)
        self.scorer = nn.Linear(layout.hidden_dim, 1)

    def encode_words(self, ids: torch.Tensor, gru: nn.GRU) -> torch.Tensor:
        """The GRU's state after each row's last word (padding never enters it)."""
        lengths = (ids > 0).sum(dim=1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embedding(ids), lengths, batch_first=True, enforce_sorted=False
        )
        _, last = gru(packed)
        return last[-1]

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        layout = self.layout
        ids = rows.round().long().clamp(0, layout.vocab - 1)
        batch = ids.shape[0]
        state = self.encode_words(ids[:, : layout.state_words], self.state_encoder)
        phrases = ids[:, layout.state_words :].reshape(batch * layout.actions, -1)
        actions = self.encode_words(phrases, self.action_encoder)
        pairs = torch.cat([state.repeat_interleave(layout.actions, dim=0), actions], dim=1)
        return self.scorer(torch.relu(self.hidden(pairs))).reshape(batch, layout.actions)


class DrrnQNetwork(QNetwork):
    """SB3's QNetwork with DRRN's scorer in place of the MLP head."""

    def __init__(self, *args: Any, drrn: dict[str, int], **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "net_arch": []})
        self.drrn = drrn
        self.q_net = DrrnScorer(DrrnLayout(**drrn))

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "drrn": self.drrn}


class DrrnPolicy(DQNPolicy):
    """SB3 DQN policy whose Q-network is DRRN; `drrn` holds `DrrnLayout`'s sizes."""

    def __init__(self, *args: Any, drrn: dict[str, int] | None = None, **kwargs: Any) -> None:
        self.drrn = asdict(DrrnLayout(**(drrn or {})))  # checked before any layer is built
        super().__init__(*args, **kwargs)

    def make_q_net(self) -> DrrnQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return DrrnQNetwork(**net_args, drrn=self.drrn).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "drrn": self.drrn}


def load_drrn(path: str) -> Any:
    """A DQN saved with `DrrnPolicy` (its class given here, not unpickled from the file)."""
    from stable_baselines3 import DQN

    from llmrl.common import trusted

    saved = trusted.open_verified(path, "model")  # an SB3 zip is a pickle: the project's own
    return DQN.load(saved, device="cpu", custom_objects={"policy_class": DrrnPolicy})


def q_values(model: Any, row: np.ndarray) -> np.ndarray:
    """The DQN's Q-values of one observation row."""
    with torch.no_grad():
        return model.q_net(torch.as_tensor(row, dtype=torch.float32)[None])[0].double().numpy()
