"""Regenerate the Python gRPC code from the .proto files (`make protos`), or check it is current.

Protos live under protos/ at the path of their protobuf package: the file
protos/llmrl/llm_gateway/v1/llm_gateway.proto (package `llmrl.llm_gateway.v1`) becomes the
modules llmrl.llm_gateway.v1.llm_gateway_pb2 / _pb2_grpc, written to services/llm_gateway/v1/
in this repository since the `llmrl` package is the services/ folder (the folder keeps a
hand-written __init__.py so that it is a package). `--check` regenerates into a temporary
folder and fails when the committed files differ (CI runs it through tests/test_protos.py).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE_ROOT = ROOT / "services"  # the folder that imports as `llmrl`


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("llmrl/**/*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on every proto; returns the generated files relative to out_dir/llmrl."""
    import grpc_tools
    from grpc_tools import protoc

    protos = proto_files()
    if not protos:
        return []
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    return sorted(p.relative_to(out_dir / "llmrl") for p in (out_dir / "llmrl").rglob("*.py*"))


def orphans(generated: list[Path]) -> list[Path]:
    """Generated-looking files under services/ that no proto generates any more (a moved or
    deleted proto leaves them behind), relative to the package root."""
    found = [
        p.relative_to(PACKAGE_ROOT)
        for p in PACKAGE_ROOT.rglob("*_pb2*.py*")
        if p.suffix in {".py", ".pyi"}  # not the byte code under __pycache__
    ]
    return sorted(rel for rel in found if rel not in set(generated))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generated = generate(out)
        stale = []
        for rel in generated:
            src, dst = out / "llmrl" / rel, PACKAGE_ROOT / rel
            if args.check:
                if not dst.exists() or not filecmp.cmp(src, dst, shallow=False):
                    stale.append(str(dst.relative_to(ROOT)))
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                print(f"wrote {dst.relative_to(ROOT)}")
        for rel in orphans(generated):
            if args.check:
                stale.append(f"{(PACKAGE_ROOT / rel).relative_to(ROOT)} (no proto generates it)")
            else:
                (PACKAGE_ROOT / rel).unlink()
                print(f"removed {(PACKAGE_ROOT / rel).relative_to(ROOT)} (no proto generates it)")
    if stale:
        print("generated gRPC code is stale; run `make protos` and commit:", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
