"""ELLM's intrinsic reward: how close what the agent just did is to a suggested goal.

`SuggestionReward.reward(transition_caption, suggestions)` embeds the transition caption and the
suggestions (sentence embeddings, batched and cached), and pays the best cosine similarity among
the suggestions when it reaches the threshold. Each goal pays at most once per episode: once a
suggestion has paid, neither it nor the goal the transition achieved pays again until `reset()`;
goals are compared in their canonical phrasing, so equivalent phrasings ("eat cow" and "attack
cow", "make crafting table" and "place crafting table") are one goal. A phrase identical to the
transition (after canonicalisation) has similarity 1 exactly.

The default threshold, 0.8, is measured for all-MiniLM-L6-v2 (the gateway's default embedding
model) with `python -m llmrl.recipes.ellm.studies.threshold`: distinct Crafter goals reach at most
0.77 ("make stone pickaxe" / "make stone sword"... see the script's table), so 0.8 never pays
one goal for another, while the suggesters' own phrasings match the transition captions
exactly (1.0). Paraphrases a model may write ("collect wood" for "chop tree": 0.46) mostly fall
below it; ELLM's 0.99 (GPT goals, paraphrase-MiniLM-L3-v2) is stricter still, its wrapper's
default 0.5 would pay wrong goals with this model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llmrl.simulator.envs.crafter.vocabulary import canonical_goal

DEFAULT_THRESHOLD = 0.8
Embed = Callable[[list[str]], np.ndarray]


def gateway_embedder(
    llm: Any, model: str | None = None, run_id: str = "default", tag: str = "ellm/reward"
) -> Embed:
    """`embed(texts) -> float32 [len(texts), dim]` through the gateway client `llm` (its
    default embedding model, all-MiniLM-L6-v2, unless `model` names another)."""

    def embed(texts: list[str]) -> np.ndarray:
        return llm.embed(list(texts), model=model, run_id=run_id, tag=tag)

    return embed


class CachedEmbedder:
    """Unit-length embeddings of texts, each text embedded once: misses go to `embed` in one
    batch. Share one between the rewards of many envs. `counters()`: texts embedded, hits."""

    def __init__(self, embed: Embed, cache_size: int = 100_000) -> None:
        if not callable(embed):
            raise ValueError(f"embed: expected a function of a list of texts, got {embed!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size: expected an integer >= 1, got {cache_size!r}")
        self.embed = embed
        self.cache_size = cache_size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._embedded = 0
        self._hits = 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = [str(text) for text in texts]
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
            self._hits += len(texts) - len(missing)
        if missing:
            vectors = np.asarray(self.embed(missing), dtype=np.float32)
            if vectors.shape[0] != len(missing) or vectors.ndim != 2:
                raise ValueError(
                    f"embed: expected {len(missing)} vectors, got an array of {vectors.shape}"
                )
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
            with self._lock:
                self._embedded += len(missing)
                for text, vector in zip(missing, vectors, strict=True):
                    self._vectors[text] = vector
                while len(self._vectors) > self.cache_size:
                    self._vectors.popitem(last=False)
            fresh = dict(zip(missing, vectors, strict=True))
        else:
            fresh = {}
        with self._lock:
            rows = [fresh[t] if t in fresh else self._vectors[t] for t in texts]
        return np.stack(rows) if rows else np.zeros((0, 0), np.float32)

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {"embedded": self._embedded, "cache_hits": self._hits}


def check_threshold(threshold: Any) -> float:
    """The threshold as a float; ValueError naming `threshold` unless a number in [0, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float | np.floating):
        raise ValueError(f"threshold: expected a number in [0, 1], got {threshold!r}")
    if not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"threshold: expected a number in [0, 1], got {threshold}")
    return float(threshold)


class SuggestionReward:
    """ELLM's reward for one env (module docstring); `reset()` at each episode start."""

    def __init__(self, embed: Embed | CachedEmbedder, threshold: float = DEFAULT_THRESHOLD) -> None:
        self.threshold = check_threshold(threshold)
        self.embedder = embed if isinstance(embed, CachedEmbedder) else CachedEmbedder(embed)
        self._paid: dict[str, None] = {}

    def reset(self) -> None:
        """A new episode: every goal may pay again."""
        self._paid.clear()

    @property
    def achieved(self) -> list[str]:
        """The goals (canonical phrasings) that paid this episode, in order."""
        return list(self._paid)

    def similarities(self, transition_caption: str, suggestions: Sequence[str]) -> np.ndarray:
        """Cosine similarity of the transition caption to each suggestion (1 for the same
        canonical phrase). Joined achievements ("wake up and chop tree") count their best part."""
        parts = [p.strip() for p in str(transition_caption).split(" and ") if p.strip()]
        if not parts or not suggestions:
            return np.zeros(len(suggestions), np.float32)
        vectors = self.embedder([*parts, *suggestions])
        cosines = vectors[len(parts) :] @ vectors[: len(parts)].T  # [suggestions, parts]
        same = np.array(
            [[canonical_goal(s) == canonical_goal(p) for p in parts] for s in suggestions]
        )
        return np.where(same, 1.0, np.clip(cosines, -1.0, 1.0)).max(axis=1).astype(np.float32)

    def reward(
        self, transition_caption: str, suggestions: Sequence[str]
    ) -> tuple[float, str | None]:
        """(reward, the suggestion that paid or None) for one step (module docstring)."""
        parts = [p.strip() for p in str(transition_caption).split(" and ") if p.strip()]
        open_parts = [p for p in parts if canonical_goal(p) not in self._paid]
        open_suggestions = [s for s in suggestions if canonical_goal(s) not in self._paid]
        if not open_parts or not open_suggestions:
            return 0.0, None
        scores = self.similarities(" and ".join(open_parts), open_suggestions)
        best = int(np.argmax(scores))
        if scores[best] < self.threshold:
            return 0.0, None
        goal = open_suggestions[best]
        self._paid[canonical_goal(goal)] = None
        for part in open_parts:
            self._paid[canonical_goal(part)] = None
        return float(scores[best]), goal
