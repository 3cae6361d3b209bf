"""Where a model runs, and in which precision.

Every component that holds a torch model (the gateway's local LMs, the learner's LLM policy,
SFT) names its device the same way: `auto` (the GPU where torch sees one, else the CPU),
`cpu`, `cuda` or `cuda:<index>`. bf16 pays only where it is native: on a GPU that computes it,
or a CPU with AVX512-BF16 or AMX; elsewhere (an AVX2-only CPU) torch emulates it, measured
~3x slower than fp32, so the choice depends on the device the model actually runs on.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

DEVICE_CHOICES = "auto, cpu, cuda or cuda:<index>"
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_device(name: str, field: str = "device") -> str:
    """`name` if it is a device name this project accepts; a ValueError naming `field` if not."""
    if not isinstance(name, str) or not _DEVICE.match(name):
        raise ValueError(f"{field}: expected {DEVICE_CHOICES}, got {name!r}")
    return name


# a settings model's device field: `device: Device = device_field("trains")`
Device = Annotated[str, AfterValidator(check_device)]


def device_field(what_it_does: str = "runs") -> Any:
    """The field of a model's device, default auto; `what_it_does`: "runs", "trains"..."""
    return Field(
        "auto",
        description=f"where the model {what_it_does}: auto (the GPU where torch sees one), "
        "cpu, cuda or cuda:<index>",
    )


def resolve_device(name: str = "auto", field: str = "device") -> Any:
    """The torch.device for `name` (`auto`: cuda where torch sees a GPU, else cpu). A named
    GPU that is not there is an error naming `field`, not a silent fall back to the CPU."""
    import torch

    check_device(name, field)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{field}: {name!r}, but torch sees no GPU here (use cpu or auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"{field}: {name!r}, but torch sees {torch.cuda.device_count()} GPU(s)"
            )
        from llmrl.common.numerics import pin_gpu_numerics

        pin_gpu_numerics()  # every model placed on a GPU computes with the same kernels
    return device


def native_bf16(device: Any = "cpu") -> bool:
    """Whether bf16 matmuls run natively on `device` (a torch.device or its name)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    from llmrl.common.provenance import isa_flags

    return bool({"avx512_bf16", "amx_bf16"} & set(isa_flags()))
