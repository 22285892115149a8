"""Normalized identity (cacheon_subnet/bundle/identity/normalize.py): a renamed / reformatted / re-commented
copy of a bundle has the same identity; a genuinely changed kernel does not."""

from __future__ import annotations

from pathlib import Path

from cacheon_subnet.bundle import bundle_from_files
from cacheon_subnet.bundle.identity.normalize import normalized_document, normalized_identity

EX = Path(__file__).resolve().parents[2] / "examples" / "norm.rmsnorm"
SRC = (EX / "rmsnorm.py").read_text()
MANIFEST = (EX / "manifest.toml").read_text()


def ident(src: str = SRC, manifest: str = MANIFEST, module: str = "rmsnorm", extra: dict | None = None) -> str | None:
    files = {f"{module}.py": src.encode(), "manifest.toml": manifest.encode(), **(extra or {})}
    return normalized_identity(bundle_from_files(files))


BASE = ident()

# a copy a miner might commit: every name changed (kernel, locals, Triton params with their
# keyword call sites, the module file and the manifest's entry), comments and docstrings rewritten,
# reformatted, and the manifest's name/description/variant changed
RENAMED = '''
# my very own kernel, (c) someone else
import torch
import triton
import triton.language as language


@triton.jit
def _k(p_in, p_w, p_out, s_in, s_out, n_cols, epsilon,
       TILE: language.constexpr):
    """A completely different docstring."""
    r = language.program_id(0)
    idx = language.arange(0, TILE)
    m = idx < n_cols
    v = language.load(p_in + r * s_in + idx, mask=m, other=0.0).to(language.float32)
    ms = language.sum(v * v, axis=0) / n_cols   # mean square
    inv = 1.0 / language.sqrt(ms + epsilon)
    g = language.load(p_w + idx, mask=m, other=0.0).to(language.float32)
    language.store(p_out + r * s_out + idx, (v * inv * g).to(p_out.dtype.element_ty), mask=m)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    rows, H = x.shape
    b = triton.next_power_of_2(H)
    _k[(rows,)](x, weight, out, x.stride(0), out.stride(0), H, eps, TILE=b,
                num_warps=min(16, max(1, b // 256)))
'''
RENAMED_MANIFEST = MANIFEST.replace('entry = "rmsnorm:rmsnorm"', 'entry = "fastnorm:rmsnorm"\nvariant = "mine"').replace(
    'name = "triton-rmsnorm"', 'name = "totally-original"'
)


def test_identity_is_stable_and_parses() -> None:
    assert BASE is not None and BASE.startswith("norm-")
    assert ident() == BASE


def test_whitespace_and_comment_copy_is_caught() -> None:
    src = SRC.replace("    row = tl.program_id(0)\n", "\n    # which row\n    row = tl.program_id( 0 )  # noqa\n\n")
    src = src.replace('"""Faithful Triton RMSNorm', '"""Another docstring entirely; Faithful')
    assert src != SRC and ident(src) == BASE


def test_rename_copy_is_caught() -> None:
    assert ident(RENAMED, RENAMED_MANIFEST, module="fastnorm") == BASE


def test_changed_constant_is_not_caught() -> None:
    assert ident(SRC.replace("rstd = 1.0 / tl.sqrt", "rstd = 1.0001 / tl.sqrt")) != BASE
    assert ident(SRC.replace("max(1, block // 256)", "max(1, block // 128)")) != BASE


def test_changed_operator_is_not_caught() -> None:
    assert ident(SRC.replace("tl.sum(x * x, axis=0) / H", "tl.sum(x * x, axis=0) * H")) != BASE
    assert ident(SRC.replace("mask = cols < H", "mask = cols <= H")) != BASE


def test_swapped_operands_are_not_caught() -> None:
    # the same names in other places is a different program (renaming is positional, not a bag)
    assert ident(SRC.replace("row * x_row_stride", "row * out_row_stride")) != BASE


def test_behaviour_manifest_fields_count() -> None:
    assert ident(manifest=MANIFEST.replace('"bfloat16", "float16", "float32"', '"bfloat16"')) != BASE
    assert ident(manifest=MANIFEST.replace('name = "triton-rmsnorm"', 'name = "x"')) == BASE


def test_entry_parameters_keep_their_names() -> None:
    # the seam calls the entry by keyword: a renamed parameter is a different (broken) kernel
    src = (
        SRC.replace("def rmsnorm(x: torch.Tensor", "def rmsnorm(inp: torch.Tensor")
        .replace("T, H = x.shape", "T, H = inp.shape")
        .replace("(x, weight, out, x.stride(0)", "(inp, weight, out, inp.stride(0)")
    )
    assert ident(src) != BASE


def test_names_spelled_in_strings_are_kept() -> None:
    # a kernel parameter named in a string (an autotune config) keeps its name: renaming it
    # would merge a working kernel with one whose config no longer reaches the parameter
    a = SRC + '\nCONFIGS = [{"BLOCK": 128}]\n'
    b = (
        a.replace("BLOCK: tl.constexpr", "TILE: tl.constexpr")
        .replace("tl.arange(0, BLOCK)", "tl.arange(0, TILE)")
        .replace("BLOCK=block", "TILE=block")
    )
    assert ident(a) != ident(b)
    # without the string the same rename is a copy
    c = (
        SRC.replace("BLOCK: tl.constexpr", "TILE: tl.constexpr")
        .replace("tl.arange(0, BLOCK)", "tl.arange(0, TILE)")
        .replace("BLOCK=block", "TILE=block")
    )
    assert ident(c) == BASE


def test_other_members_count_by_bytes_and_bad_source_has_none() -> None:
    assert ident(extra={"table.json": b"[1]"}) != ident(extra={"table.json": b"[2]"})
    assert ident("def rmsnorm(:\n") is None
    doc = normalized_document(bundle_from_files({"rmsnorm.py": SRC.encode(), "manifest.toml": MANIFEST.encode()}))
    assert doc and "Faithful" not in str(doc["modules"]) and "_rmsnorm_kernel" not in str(doc["modules"])


def test_multi_module_bundle_renames_across_imports() -> None:
    helper = "def scale(v, k):\n    return v * k\n"
    main = "from .util import scale\n\n\ndef rmsnorm(x, weight, out, eps):\n    out.copy_(scale(x, 2.0))\n"
    man = MANIFEST.replace('entry = "rmsnorm:rmsnorm"', 'entry = "main:rmsnorm"')
    a = normalized_identity(
        bundle_from_files({"main.py": main.encode(), "util.py": helper.encode(), "manifest.toml": man.encode()})
    )
    helper2 = "def mul(a, b):\n    return a * b\n"
    main2 = "from .tools import mul\n\n\ndef rmsnorm(x, weight, out, eps):\n    out.copy_(mul(x, 2.0))\n"
    man2 = MANIFEST.replace('entry = "rmsnorm:rmsnorm"', 'entry = "entry:rmsnorm"')
    b = normalized_identity(
        bundle_from_files({"entry.py": main2.encode(), "tools.py": helper2.encode(), "manifest.toml": man2.encode()})
    )
    c = normalized_identity(
        bundle_from_files(
            {"entry.py": main2.replace("2.0", "3.0").encode(), "tools.py": helper2.encode(), "manifest.toml": man2.encode()}
        )
    )
    assert a is not None and a == b and a != c


def test_a_policy_clean_huge_hex_literal_still_has_an_identity() -> None:
    # red team 2026-12-04: a hex literal parses at any size, ast.dump writes it in decimal and raised
    # ValueError past 4300 digits, so the bundle got no identity and its renamed copies were timed
    guard = "    T, H = x.shape\n    if H > 0x" + "f" * 4000 + ":\n        raise ValueError\n"
    src = SRC.replace("    T, H = x.shape\n", guard)
    mine = ident(src)
    assert mine is not None and mine != BASE
    assert ident(src.replace("_rmsnorm_kernel", "_k").replace("rstd", "inv")) == mine  # its copy is caught
    assert ident(src.replace("0xf", "0xe", 1)) != mine  # and another value is another program
