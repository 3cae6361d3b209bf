"""LLM-Personalize diagnostic: does a planner adapter fit the decisions of its SFT data?

    .venv/bin/python -m llmrl.recipes.llm_personalize.studies.fit \
        --data runs/eval-lp-h/datasets/bootstrap.jsonl \
        --adapter .llmrl/adapters/smollm2/<adapter>/0 --examples 60 [--model smollm2] [--seed 0]

A plan's SFT loss is the mean over all of its tokens, and most of them are settled once a line
has begun ("go to room" is followed by a room the grammar allows). The tokens that decide what
the planner does are few: the first token of each line's skill (go, pick, place or mission),
whether the plan goes on after a line (a line break) and where it stops (end of turn). This
script reads `--examples` examples of a chat JSONL (teacher-forced: each target token given the
prompt and the target before it), with the base model and with `--adapter` on it, and reports
per kind of decision how often the model's most likely token is the target's and its mean
probability, beside the other target tokens. An adapter that fits its demonstrations scores near
1 at every kind; one whose loss is low while a kind stays near chance has learned the plan's
wording, not its decisions. `--model` (the base model: a gateway model name, or a local model
directory) and `--seed` (of the sample) are the recipe's keys (`LlmPersonalizeConfig`).

Prints one table and, last, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from llmrl.recipes.llm_personalize.config import LlmPersonalizeConfig
from llmrl.recipes.options import add_model_options, parse_model_options

# the recipe's keys this study takes
RECIPE_KEYS = ["model", "seed"]

NUMBERED = re.compile(r"\d+\. ")


def decision_kinds(answer: str, offsets: list[tuple[int, int]]) -> dict[int, str]:
    """{target token index: kind} for a plan `answer` whose target tokens cover `offsets`
    (character spans in the answer; the end-of-turn tokens after it start at len(answer)).

    Kinds: `skill:<word>` (the token where line i's skill begins, after "i. "), `go on` (the
    token after a line that is not the last: its line break), `stop` (the token after the last
    line: end of turn). Every other target token is `other`.
    """
    lines = answer.split("\n")
    decisions: dict[int, str] = {}  # character position -> the decision made there
    position = 0
    for number, line in enumerate(lines):
        prefix = NUMBERED.match(line)
        skill_at = prefix.end() if prefix else 0
        decisions[position + skill_at] = f"skill:{line[skill_at:].split(' ')[0] or '?'}"
        position += len(line)
        decisions[position] = "stop" if number == len(lines) - 1 else "go on"
        position += 1
    # a decision is the token covering its position (a tokenizer may merge a line break into
    # the token before it); end-of-turn markers may have empty spans
    return {
        index: next(
            (kind for at, kind in decisions.items() if start <= at < max(end, start + 1)),
            "other",
        )
        for index, (start, end) in enumerate(offsets)
    }


def target_tokens(
    tokenizer: Any, messages: list[dict[str, Any]]
) -> tuple[list[int], list[int], dict[int, str]]:
    """(prompt ids, target ids, decision kinds) of one example, tokenized as the SFT job does
    (`tokenize_chat`: the prompt, then the answer and end-of-turn marker as one piece)."""
    from llmrl.learner.algorithms.sft import IGNORE_INDEX, tokenize_chat

    ids, labels = tokenize_chat(tokenizer, messages)
    first = next(i for i in range(len(labels) - 1, -1, -1) if labels[i] == IGNORE_INDEX) + 1
    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    prompt = tokenizer.apply_chat_template(plain[:-1], add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(plain, tokenize=False)
    encoded = tokenizer(full[len(prompt) :], add_special_tokens=False, return_offsets_mapping=True)
    if encoded["input_ids"] != ids[first:]:
        raise ValueError("the target's tokens differ from the SFT job's tokenization")
    answer_at = full[len(prompt) :].find(messages[-1]["content"])
    offsets = [(a - answer_at, b - answer_at) for a, b in encoded["offset_mapping"]]
    return ids[:first], ids[first:], decision_kinds(messages[-1]["content"], offsets)


def fit(model: Any, tokenizer: Any, examples: list[list[dict[str, Any]]]) -> dict[str, dict]:
    """Per kind: count, argmax accuracy and mean probability of the target token."""
    import torch
    from tqdm import tqdm

    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    with torch.no_grad():
        for messages in tqdm(examples, desc="examples", unit="example"):
            prompt, target, kinds = target_tokens(tokenizer, messages)
            logits = model(input_ids=torch.tensor([prompt + target])).logits[0]
            for index, kind in kinds.items():
                probs = torch.softmax(logits[len(prompt) + index - 1].float(), -1)
                right = int(probs.argmax()) == target[index]
                groups = {kind, kind.split(":")[0]}
                for group in groups:
                    total = totals[group]
                    total[0] += 1
                    total[1] += right
                    total[2] += float(probs[target[index]])
    return {
        kind: {"count": int(n), "argmax_right": right / n, "mean_probability": p / n}
        for kind, (n, right, p) in sorted(totals.items())
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="--model: a gateway model name, or a local model directory",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True, type=Path, help="chat JSONL (an SFT dataset)")
    parser.add_argument(
        "--adapter",
        type=Path,
        help="LoRA adapter directory (a version: .../adapters/<model>/<adapter>/<version>); "
        "without it only the base model is read",
    )
    parser.add_argument("--examples", type=int, default=60, help="examples read (a sample)")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads")
    # --model: the base model (a gateway model name, or a local model directory);
    # --seed: the seed of the sample
    add_model_options(parser, LlmPersonalizeConfig, RECIPE_KEYS)
    # no houses are read here: data_dir none keeps the config from checking any
    args, config = parse_model_options(parser, LlmPersonalizeConfig, argv, data_dir=None)
    if args.examples < 1:
        parser.error("--examples must be positive")
    if not args.data.is_file():
        parser.error(f"--data: no such file {args.data}")
    if args.adapter is not None and not (args.adapter / "adapter_config.json").is_file():
        parser.error(f"--adapter: {args.adapter} holds no adapter_config.json (a LoRA version)")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmrl.learner.adapters import base_model_dir
    from llmrl.learner.algorithms.sft import read_chat_examples

    try:
        examples = read_chat_examples(str(args.data))
    except ValueError as exc:  # names the file and line
        parser.error(f"--data: {exc}")
    try:
        base = Path(config.model) if Path(config.model).is_dir() else base_model_dir(config.model)
    except ValueError as exc:  # an unknown model, or one without local weights
        parser.error(f"--model: {exc}")
    if not examples:
        parser.error(f"--data: {args.data} holds no examples")
    for number, messages in enumerate(examples, 1):
        if messages[-1].get("weight", 1) == 0:  # read_chat_examples checked it is the assistant's
            parser.error(
                f"--data: example {number}'s plan has weight 0 (not trained, so not read here)"
            )
    torch.set_num_threads(args.torch_threads)
    tokenizer = AutoTokenizer.from_pretrained(base)
    random.Random(config.seed).shuffle(examples)
    examples = examples[: args.examples]

    figures: dict[str, Any] = {"data": str(args.data), "examples": len(examples)}
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    figures["base"] = fit(model, tokenizer, examples)
    if args.adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(args.adapter)).eval()
        figures["adapter"] = fit(model, tokenizer, examples)
        figures["adapter_dir"] = str(args.adapter)

    readers = [name for name in ("base", "adapter") if name in figures]
    print(f"{len(examples)} examples of {args.data}")
    print(
        "| decision | tokens | " + " | ".join(f"{r}: argmax right / mean p" for r in readers) + " |"
    )
    print("|---|---|" + "---|" * len(readers))
    for kind, row in figures["base"].items():
        cells = [
            f"{figures[r][kind]['argmax_right']:.2f} / {figures[r][kind]['mean_probability']:.2f}"
            for r in readers
        ]
        print(f"| {kind} | {row['count']} | " + " | ".join(cells) + " |")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
