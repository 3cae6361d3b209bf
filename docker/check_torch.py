"""Fail the image build unless the installed torch is the build that was asked for: the CPU
build ("+cpu"), or a CUDA build ("+cuNNN") only when TORCH_INDEX is a CUDA index (.../cuNNN),
and no nvidia-* wheels beside a CPU build. docker/Dockerfile runs it after each pip install."""

import os
import re
import sys
from importlib import metadata

index = os.environ.get("TORCH_INDEX", "")
cuda_asked = re.search(r"/cu\d+/?$", index) is not None
try:
    version = metadata.version("torch")
except metadata.PackageNotFoundError:
    sys.exit("torch is not installed")
nvidia = sorted(
    d.metadata["Name"]
    for d in metadata.distributions()
    if (d.metadata["Name"] or "").lower().startswith("nvidia-")
)
local = version.partition("+")[2]
ok = local.startswith("cu") if cuda_asked else (local == "cpu" and not nvidia)
if not ok:
    sys.exit(
        f"torch {version} (nvidia wheels: {nvidia or 'none'}) is not the build asked for "
        f"by TORCH_INDEX={index!r}: want {'a CUDA' if cuda_asked else 'the CPU'} build"
    )
print(f"torch {version}: {'CUDA' if cuda_asked else 'CPU'} build, as asked")
