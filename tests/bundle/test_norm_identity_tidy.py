"""Red team, copy evasion: dead code and reordered definitions (identity/tidy.py) are copies; the
same edits where order or the dead statement can change what runs (an import-time error, a
rebinding) and genuinely changed kernels (tiling, math, literals) are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from cacheon_subnet.bundle import bundle_from_files
from cacheon_subnet.bundle.identity.normalize import normalized_identity

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RMS = (EXAMPLES / "norm.rmsnorm" / "rmsnorm.py").read_text()
RMS_MAN = (EXAMPLES / "norm.rmsnorm" / "manifest.toml").read_text()
SILU = (EXAMPLES / "activation.silu_and_mul" / "silu_and_mul.py").read_text()
SILU_MAN = (EXAMPLES / "activation.silu_and_mul" / "manifest.toml").read_text()


def ident(src: str, man: str = RMS_MAN, module: str = "rmsnorm") -> str | None:
    return normalized_identity(bundle_from_files({f"{module}.py": src.encode(), "manifest.toml": man.encode()}))


def split(src: str, entry: str) -> tuple[str, str, str]:
    k, w = src.index("@triton.jit"), src.index(f"def {entry}(")
    return src[:k], src[k:w], src[w:]


def copies(src: str, entry: str) -> dict[str, str]:
    head, kernel, wrapper = split(src, entry)
    return {
        "wrapper before kernel": head + wrapper + "\n\n" + kernel,
        "imports reordered": src.replace("import torch\nimport triton\n", "import triton\nimport torch\n"),
        "unused function": src + "\n\ndef _unused(a, b):\n    return a + b\n",
        "unused kernel": src + "\n\n@triton.jit\ndef _unused_k(p, N: tl.constexpr = 4):\n    tl.store(p, N)\n",
        "unused constant": head + "UNUSED = (3, -1.5)\n\n\n" + kernel + wrapper,
        "unused import": src.replace("import torch\n", "import torch\nimport math\n"),
        "unused helper chain": src + "\n\ndef _a(x):\n    return _b(x)\n\n\ndef _b(x):\n    return x\n",
        "pass and literal statements": src.replace(f"def {entry}(", f"def {entry}(", 1).replace(
            "    T, ", "    pass\n    0\n    ...\n    T, ", 1
        ),
    }


@pytest.mark.parametrize("case", sorted(copies(RMS, "rmsnorm")))
def test_rmsnorm_copies_are_caught(case: str) -> None:
    src = copies(RMS, "rmsnorm")[case]
    assert src != RMS and ident(src) == ident(RMS)


@pytest.mark.parametrize("case", sorted(copies(SILU, "silu_and_mul")))
def test_silu_copies_are_caught(case: str) -> None:
    src = copies(SILU, "silu_and_mul")[case]
    base = ident(SILU, SILU_MAN, "silu_and_mul")
    assert src != SILU and base is not None and ident(src, SILU_MAN, "silu_and_mul") == base


def test_dead_code_that_fails_at_import_is_not_dropped() -> None:
    head, kernel, wrapper = split(RMS, "rmsnorm")
    base = ident(RMS)
    # a dead kernel decorated before `import triton`: NameError at import
    assert ident("@triton.jit\ndef _u(p):\n    pass\n\n\n" + RMS) != base
    # a dead def annotated with a name bound only later
    assert ident("def _u(p: torch.Tensor):\n    pass\n\n\n" + RMS) != base
    # a dead constant that raises, a dead kernel whose decorator call may raise
    assert ident(RMS + "\nX = 1 // 0\n") != base
    assert ident(RMS + '\n\n@triton.autotune(configs=[], key=["N"])\n@triton.jit\ndef _u(p, N):\n    pass\n') != base


def test_order_that_matters_is_kept() -> None:
    head, kernel, wrapper = split(RMS, "rmsnorm")
    # a default read at import from a constant: defined after the def it is a NameError
    k = kernel.replace("BLOCK: tl.constexpr)", "BLOCK: tl.constexpr = B)")
    good = ident(head + "B = 128\n\n\n" + k + wrapper)
    assert good is not None and good != ident(head + k + "\nB = 128\n\n\n" + wrapper)
    # the kernel's annotation `tl.constexpr` read before `import triton.language as tl`: NameError
    late_tl = head.replace("import triton.language as tl\n", "") + kernel + "import triton.language as tl\n\n\n" + wrapper
    assert ident(late_tl) != ident(RMS)
    # a name bound twice: the later def wins, so swapping them is another program
    one = "def _h(v):\n    return v + 1.0\n\n\n"
    two = "def _h(v):\n    return v * 2.0\n\n\n"
    w = wrapper.replace("    T, H = x.shape\n", "    x = _h(x)\n    T, H = x.shape\n")
    assert ident(head + one + two + kernel + w) != ident(head + two + one + kernel + w)


def test_genuine_changes_still_differ() -> None:
    base = ident(RMS)
    for a, b in [
        ("block = triton.next_power_of_2(H)", "block = 2 * triton.next_power_of_2(H)"),  # tiling
        ("block // 256", "block // 512"),  # num_warps
        ("rstd = 1.0 /", "rstd = 1 /"),  # int vs float literal
        ("tl.sum(x * x, axis=0) / H", "tl.sum(x * x, axis=0) * (1 / H)"),  # rounding
        ("BLOCK: tl.constexpr)", "BLOCK: tl.constexpr = 1024)"),
    ]:
        assert a in RMS and ident(RMS.replace(a, b)) != base, b
    # a used helper is never dropped: changing it changes the identity
    helper = RMS + "\n\ndef _scale(v):\n    return v\n"
    used = helper.replace("    T, H = x.shape\n", "    x = _scale(x)\n    T, H = x.shape\n")
    assert ident(used) != ident(used.replace("return v\n", "return v * 1.0\n"))
