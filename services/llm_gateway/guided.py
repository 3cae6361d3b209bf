"""Guided decoding for local models: keep every line of an answer within a set of choices.

`LineAutomaton` turns a `GuidedLines` request into allowed next tokens. The token sequences
of line i form a trie built from the tokenizer's own encoding of the whole line
("3. go to room kitchen_0\\n"), so the allowed tokens are exactly those the model writes for
that text when it writes it freely: a model fine-tuned on such plans is steered, not
re-tokenised. Any line may end the answer with end-of-sequence in place of its line break, as
a plan ends in fine-tuning data (lines joined by line breaks, none after the last: a grammar
that forced a line break first would make a fine-tuned model write lines it was never taught
after a shorter plan); the last permitted line must end so. End-of-sequence is also allowed at
the start of every line after the first.

`GuidedLinesProcessor` applies one automaton per batch row (rows without one are left alone)
as a transformers logits processor. A row's state is re-derived from the tokens it generated
so far: answers are short, and padding or batch composition can never desynchronise it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import LogitsProcessor

from llmrl.llm_gateway.api_types import GuidedLines

Encode = Callable[[list[str]], list[list[int]]]


class _Node:
    __slots__ = ("children", "end")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.end = False  # a complete line ends here


class LineAutomaton:
    """The token-level grammar of one guided answer."""

    def __init__(self, guided: GuidedLines, encode: Encode, eos_ids: Sequence[int]) -> None:
        self.guided = guided
        self.encode = encode
        self.eos_ids = tuple(sorted(set(eos_ids)))
        self._lines: dict[int, _Node] = {}

    def _is_last(self, line: int) -> bool:
        max_lines = self.guided.max_lines
        return max_lines is not None and line >= max_lines - 1

    def line_trie(self, line: int) -> _Node:
        """The trie of line `line` (0-based), built on first use."""
        root = self._lines.get(line)
        if root is not None:
            return root
        last = self._is_last(line)
        prefix = f"{line + 1}. " if self.guided.numbered else ""
        texts = [prefix + choice for choice in self.guided.choices]
        root = _Node()
        for tokens in self.encode(texts):  # the answer may end after the line
            node = self._walk(root, tokens)
            for eos in self.eos_ids:
                node.children.setdefault(eos, _Node())
        if not last:  # or go on to the next; a tokenizer may merge the break into a token
            for tokens in self.encode([text + "\n" for text in texts]):
                self._walk(root, tokens).end = True
        self._lines[line] = root
        return root

    @staticmethod
    def _walk(root: _Node, tokens: Sequence[int]) -> _Node:
        node = root
        for token in tokens:
            node = node.children.setdefault(token, _Node())
        return node

    def allowed(self, generated: Sequence[int]) -> list[int] | None:
        """The tokens allowed after `generated`; None when the answer is over (no constraint)."""
        line, node = 0, self.line_trie(0)
        for token in generated:
            if token in self.eos_ids:
                return None
            node = node.children.get(token)  # type: ignore[assignment]
            if node is None:  # not reachable while every step is guided; stop guiding
                return None
            if node.end:
                line += 1
                node = self.line_trie(line)
        allowed = list(node.children)
        if line > 0 and node is self._lines[line]:  # at a line start: the answer may end
            allowed.extend(self.eos_ids)
        return allowed


class GuidedLinesProcessor(LogitsProcessor):
    """Masks every token a row's automaton does not allow (rows with None are free)."""

    def __init__(self, automata: list[LineAutomaton | None], prompt_width: int) -> None:
        self.automata = automata
        self.prompt_width = prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for row, automaton in enumerate(self.automata):
            if automaton is None:
                continue
            allowed = automaton.allowed(input_ids[row, self.prompt_width :].tolist())
            if not allowed:
                continue
            index = torch.tensor(allowed, device=scores.device)
            kept = scores[row, index]
            scores[row] = float("-inf")
            scores[row, index] = kept
        return scores
