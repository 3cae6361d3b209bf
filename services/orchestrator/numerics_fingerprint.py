"""The bits of the ops a run's figures go through, on this machine: `llmrl numerics fingerprint`.

A run repeats on another CPU only if every op it computes gives the same bits there. Comparing
two runs' rows says whether they did, not where they parted. A fingerprint runs each kind of
op llmrl's recipes use (GEMMs of the shapes SmolLM2 and the RL baselines' networks take, the
attention kernel, the element-wise and reduction kernels, convolutions, an Adam step, numpy's
BLAS and ufuncs, the local models' weights after their conversion, SmolLM2's logits and
gradients, MiniLM's embeddings) on fixed inputs, under the process's pins and thread count,
and records a digest of each output. Two machines' fingerprints compared op by op name the
ops whose bits differ: those are where a run's figures can part.

    llmrl numerics fingerprint --out intel.json          # on one machine
    llmrl numerics fingerprint --against intel.json      # on another: exit 1 if any op differs
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = "llmrl-numerics-fingerprint"
MAX_FILE_BYTES = 1 << 20  # a fingerprint is a few KiB; refuse anything far larger


def digest(value: Any) -> str:
    """16 hex digits of SHA-256 over an array's or tensor's bytes (dtype and shape included)."""
    import numpy as np

    array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    array = np.ascontiguousarray(array)
    head = f"{array.dtype.str}{array.shape}".encode()
    return hashlib.sha256(head + array.tobytes()).hexdigest()[:16]


def _torch_ops() -> dict[str, Callable[[], Any]]:
    import torch
    import torch.nn.functional as F

    def inputs(*shape: int, seed: int = 0) -> Any:
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(*shape, generator=generator)

    def mlp() -> Any:
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 8)
        )

    x, y = inputs(32, 64, seed=1), inputs(32, 8, seed=2)

    def np_sqrt(tensor: Any) -> Any:
        import numpy as np

        return np.sqrt(tensor.numpy())

    def flat_grads(net: Any) -> Any:
        return torch.cat([p.grad.flatten() for p in net.parameters()])

    # The Adam case below parts even where every GEMM and ufunc agrees (two CPU kinds under
    # MKL's compatible branch); these pieces of it say which part: the forward, the backward,
    # the clipping, or the optimiser's own element-wise update.
    def mlp_gradients(clip: bool) -> Any:
        net = mlp()
        F.mse_loss(net(x), y).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        return flat_grads(net)

    # `torch.sqrt` (and so the denominator of torch's default Adam, the per-tensor loop on a
    # CPU) goes to MKL's vector math, whose roots are not always correctly rounded and differ
    # by CPU vendor even under the compatible branch; the fused kernel computes them with
    # ATen's own vector code.
    def adam_on_fixed_gradients(fused: bool = False) -> Any:
        weights = torch.nn.Parameter(inputs(256, 64, seed=7))
        optimiser = torch.optim.Adam([weights], lr=1e-3, eps=1e-5, fused=fused)
        for step in range(3):
            weights.grad = inputs(256, 64, seed=8 + step) * 0.01
            optimiser.step()
        return weights

    def adam_steps(fused: bool = False) -> Any:
        net = mlp()
        optimiser = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-5, fused=fused)
        for _ in range(3):
            optimiser.zero_grad()
            F.mse_loss(net(x), y).backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            optimiser.step()
        return torch.cat([p.detach().flatten() for p in net.parameters()])

    q, k, v = (inputs(1, 9, 24, 64, seed=s) for s in (3, 4, 5))
    return {
        "torch.randn (seeded generator)": lambda: inputs(1000),
        "torch.mm 1x576 @ 576x576 (one token)": lambda: inputs(1, 576) @ inputs(576, 576, seed=1),
        "torch.mm 37x576 @ 576x1536 (a prompt, MLP)": lambda: (
            inputs(37, 576) @ inputs(576, 1536, seed=1)
        ),
        "torch.mm 8x576 @ 576x49152 (LM head)": lambda: inputs(8, 576) @ inputs(576, 49152, seed=1),
        "F.linear with bias 64x147 -> 64": lambda: F.linear(
            inputs(64, 147), inputs(64, 147, seed=1), inputs(64, seed=2)
        ),
        "torch.bmm 9x24x64 @ 9x64x24 (attention scores)": lambda: torch.bmm(
            q[0], k[0].transpose(1, 2)
        ),
        "F.scaled_dot_product_attention (causal)": lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=True
        ),
        "log_softmax over 49152": lambda: torch.log_softmax(inputs(8, 49152), dim=-1),
        "softmax over 7": lambda: torch.softmax(inputs(64, 7), dim=-1),
        "exp": lambda: torch.exp(inputs(100_000)),
        "log": lambda: torch.log(inputs(100_000).abs() + 1e-3),
        "tanh": lambda: torch.tanh(inputs(100_000)),
        "sigmoid": lambda: torch.sigmoid(inputs(100_000)),
        "silu": lambda: F.silu(inputs(100_000)),
        "gelu": lambda: F.gelu(inputs(100_000)),
        "rsqrt of mean of squares (RMSNorm)": lambda: torch.rsqrt(
            inputs(37, 576).pow(2).mean(-1, keepdim=True) + 1e-5
        ),
        "layer_norm": lambda: F.layer_norm(inputs(37, 384), (384,)),
        "sum of 100000": lambda: inputs(100_000).sum(),
        "mean and var along rows": lambda: torch.var_mean(inputs(256, 1000), dim=1)[0],
        "cumsum": lambda: torch.cumsum(inputs(10_000), 0),
        "conv2d 3->32, 8x8 stride 4 (NatureCNN)": lambda: F.conv2d(
            inputs(4, 3, 64, 64), inputs(32, 3, 8, 8, seed=1), stride=4
        ),
        "Adam: 3 steps of an MLP with grad clipping": adam_steps,
        "MLP forward 32x64 -> 256 (tanh) -> 8": lambda: mlp()(x),
        "MLP gradients of the MSE loss": lambda: mlp_gradients(clip=False),
        "MLP gradients clipped to norm 0.5": lambda: mlp_gradients(clip=True),
        "Adam: 3 steps on given gradients (no network)": adam_on_fixed_gradients,
        "sqrt": lambda: torch.sqrt(inputs(100_000).abs()),
        "sqrt, correctly rounded (numpy, the reference)": lambda: np_sqrt(inputs(100_000).abs()),
        "Adam, fused kernel: 3 steps on given gradients": lambda: adam_on_fixed_gradients(True),
        "Adam, fused kernel: 3 steps of the MLP with clipping": lambda: adam_steps(True),
    }


def _numpy_ops() -> dict[str, Callable[[], Any]]:
    import numpy as np

    def rng(seed: int = 0) -> Any:
        return np.random.default_rng(seed)

    return {
        "numpy Generator.normal": lambda: rng().normal(size=1000),
        "numpy matmul float64 64x256 @ 256x128": lambda: (
            rng().normal(size=(64, 256)) @ rng(1).normal(size=(256, 128))
        ),
        "numpy matmul float32 64x256 @ 256x128": lambda: (
            rng().normal(size=(64, 256)).astype(np.float32)
            @ rng(1).normal(size=(256, 128)).astype(np.float32)
        ),
        "numpy sum of 100000 float64": lambda: np.sum(rng().normal(size=100_000)),
        "numpy sum of 100000 float32": lambda: np.sum(rng().normal(size=100_000).astype("f4")),
        "numpy exp and log": lambda: np.log1p(np.exp(rng().normal(size=100_000))),
        "numpy linalg.solve 64x64": lambda: np.linalg.solve(
            rng().normal(size=(64, 64)) + 8 * np.eye(64), rng(1).normal(size=64)
        ),
    }


def _model_ops() -> dict[str, Callable[[], Any]]:
    def smollm2() -> Any:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from llmrl.llm_gateway.local_models import smollm2_dir

        path = smollm2_dir()
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return model, tokenizer

    loaded: dict[str, Any] = {}

    def model() -> Any:
        if "smollm2" not in loaded:
            loaded["smollm2"] = smollm2()
        return loaded["smollm2"]

    prompt = "You are in a room. You see a red ball two steps ahead. Your goal: go to the red ball."

    def weights() -> Any:
        import torch

        net, _ = model()
        return torch.cat([p.detach().flatten()[:4096] for p in net.parameters()])

    def logits() -> Any:
        import torch

        net, tokenizer = model()
        with torch.no_grad():
            return net(**tokenizer(prompt, return_tensors="pt")).logits[0, -4:]

    def gradients() -> Any:
        import torch

        net, tokenizer = model()
        batch = tokenizer(prompt, return_tensors="pt")
        net.zero_grad()
        net(**batch, labels=batch["input_ids"]).loss.backward()
        grads = [p.grad.flatten()[:4096] for p in net.parameters() if p.grad is not None]
        net.zero_grad()
        return torch.cat(grads[-6:])

    def minilm() -> Any:
        from sentence_transformers import SentenceTransformer

        from llmrl.llm_gateway.local_models import minilm_dir

        encoder = SentenceTransformer(str(minilm_dir()), device="cpu")
        return encoder.encode(["collect wood", "place crafting table", "eat cow"])

    return {
        "SmolLM2 weights after the GGUF conversion": weights,
        "SmolLM2 logits, last 4 positions of a prompt": logits,
        "SmolLM2 gradients of the LM loss (last 6 tensors)": gradients,
        "MiniLM sentence embeddings": minilm,
    }


def fingerprint(models: bool = True) -> dict[str, Any]:
    """This machine's fingerprint: where it ran (CPU, numerics) and a digest per op. An op that
    fails here is recorded as 'error: ...' rather than stopping the rest."""
    from llmrl.common.numerics import numerics_provenance
    from llmrl.common.provenance import machine_provenance

    ops = {**_torch_ops(), **_numpy_ops(), **(_model_ops() if models else {})}
    digests = {}
    for name, op in ops.items():
        try:
            digests[name] = digest(op())
        except Exception as exc:  # one missing model must not hide the other ops' bits
            digests[name] = f"error: {type(exc).__name__}: {exc}"[:200]
    machine = machine_provenance()
    return {
        "format": FORMAT,
        **{key: machine[key] for key in ("cpu", "isa", "packages")},
        "numerics": numerics_provenance(),
        "ops": digests,
    }


def read_fingerprint(path: Path) -> dict[str, Any]:
    """A fingerprint file (untrusted: from another machine): JSON of the expected shape and
    size, or a ValueError saying what is wrong with it."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a fingerprint")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a fingerprint (written by `llmrl numerics fingerprint`)")
    ops = data.get("ops")
    if not isinstance(ops, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in ops.items()
    ):
        raise ValueError(f"{path}: ops must map each op's name to its digest")
    return data


def compare(here: dict[str, Any], there: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(op, digest here, digest there, same bits) for every op either side has, in this
    side's order. An op one side did not run ('-' there, e.g. `--no-models`) is not compared
    (None); one that failed on either side is not the same."""
    names = list(here["ops"]) + [name for name in there["ops"] if name not in here["ops"]]
    rows: list[tuple[str, str, str, bool | None]] = []
    for name in names:
        mine, theirs = here["ops"].get(name, "-"), there["ops"].get(name, "-")
        if "-" in (mine, theirs):
            rows.append((name, mine, theirs, None))
            continue
        rows.append((name, mine, theirs, mine == theirs and not mine.startswith("error")))
    return rows
