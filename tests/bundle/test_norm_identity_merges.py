"""Red team: genuinely different bundles that the normalized identity once merged (a false copy
settles an honest later commit from an earlier, different one's verdict: it loses its crown).
Every pair here passes the static screen, so each would get an identity in the validator."""

from __future__ import annotations

from pathlib import Path

from cacheon_subnet.bundle import bundle_from_files
from cacheon_subnet.bundle.identity.normalize import normalized_identity

EX = Path(__file__).resolve().parents[2] / "examples" / "norm.rmsnorm"
SRC = (EX / "rmsnorm.py").read_text()
MAN = (EX / "manifest.toml").read_text()
MAIN_MAN = MAN.replace('entry = "rmsnorm:rmsnorm"', 'entry = "main:rmsnorm"')


def ident(files: dict[str, str]) -> str | None:
    return normalized_identity(bundle_from_files({k: v.encode() for k, v in files.items()}))


def test_keyword_call_through_a_reexport_is_not_merged() -> None:
    # `from .pkg import f` where pkg/__init__.py re-exports impl.f: the keywords bind by the
    # def's own parameter names, so f(v, k) -> v - k and f(k, v) -> k - v differ on f(v=x, k=2)
    main = "from .pkg import f\n\n\ndef rmsnorm(x, weight, out, eps):\n    out.copy_(f(v=x, k=2.0))\n"
    base = {"main.py": main, "pkg/__init__.py": "from .impl import f\n", "manifest.toml": MAIN_MAN}
    a = ident({**base, "pkg/impl.py": "def f(v, k):\n    return v - k\n"})
    b = ident({**base, "pkg/impl.py": "def f(k, v):\n    return k - v\n"})
    assert a is not None and a != b
    # a rename through the same re-export is still a copy
    c = ident(
        {
            **base,
            "pkg/impl.py": "def f(v, k):\n    return v - k\n",
            "main.py": main.replace("f(v=x, k=2.0)", "f(v=x, k=2.0) "),
        }
    )
    assert c == a


def test_triton_reserved_parameter_names_are_kept() -> None:
    # Triton's launcher binds `debug` (and grid, warmup, options, backend, num_warps, ...) itself:
    # a kernel parameter so named passed by position is "got multiple values for argument
    # 'debug'" at launch (triton 3.6 create_function_from_signature); renamed, it runs
    broken = (
        SRC.replace("H, eps, BLOCK: tl.constexpr", "debug, eps, BLOCK: tl.constexpr")
        .replace("mask = cols < H", "mask = cols < debug")
        .replace("axis=0) / H", "axis=0) / debug")
    )
    assert broken != SRC
    assert ident({"rmsnorm.py": broken, "manifest.toml": MAN}) != ident({"rmsnorm.py": SRC, "manifest.toml": MAN})


TWO = SRC + "\n\ndef slow(x, weight, out, eps):\n    out.copy_(x)\n"
SECOND = '\n[[ops]]\nslot = "norm.rmsnorm"\nentry = "rmsnorm:{}"\nvariant = "b"\n'


def test_order_of_two_ops_of_one_slot_counts() -> None:
    # the qualifier times the first op of a slot in manifest order (loop._qualify)
    # (each op keeps its variant, so the engine's order by variant is the same in both)
    fast_first = MAN + SECOND.format("slow")
    head, op = MAN.split("[[ops]]")
    slow_first = head + SECOND.format("slow").lstrip("\n") + "\n[[ops]]" + op
    assert ident({"rmsnorm.py": TWO, "manifest.toml": fast_first}) != ident({"rmsnorm.py": TWO, "manifest.toml": slow_first})
    # ops of different slots in either order are a copy
    other = '\n[[ops]]\nslot = "activation.silu_and_mul"\nentry = "rmsnorm:slow2"\n'
    src = TWO + "\n\ndef slow2(x, out):\n    out.copy_(x)\n"
    swapped = head + other.lstrip("\n") + "\n[[ops]]" + op
    assert ident({"rmsnorm.py": src, "manifest.toml": MAN + other}) == ident({"rmsnorm.py": src, "manifest.toml": swapped})


def test_variants_sharing_a_custom_op_tag_count() -> None:
    # "x-y" and "x_y" register the same custom-op name: the engine refuses the second
    a = MAN.replace('entry = "rmsnorm:rmsnorm"', 'entry = "rmsnorm:rmsnorm"\nvariant = "x-y"') + SECOND.format("slow")
    b = a.replace('variant = "b"', 'variant = "x_y"')
    c = a.replace('variant = "b"', 'variant = "x_z"')
    assert ident({"rmsnorm.py": TWO, "manifest.toml": b}) != ident({"rmsnorm.py": TWO, "manifest.toml": c})


def test_variant_labels_that_reorder_candidates_count() -> None:
    # the engine tree sorts a slot's candidates by variant and dispatch takes the first eligible
    # one (engine_tree.py, seams/dispatch.py): "a" before "b" (was "default", after) swaps which kernel serves the slot
    a = MAN + SECOND.format("slow")
    b = MAN.replace('entry = "rmsnorm:rmsnorm"', 'entry = "rmsnorm:rmsnorm"\nvariant = "a"') + SECOND.format("slow")
    assert ident({"rmsnorm.py": TWO, "manifest.toml": a}) != ident({"rmsnorm.py": TWO, "manifest.toml": b})
    # relabelling that keeps the order is a copy
    c = MAN.replace('entry = "rmsnorm:rmsnorm"', 'entry = "rmsnorm:rmsnorm"\nvariant = "z"') + SECOND.format("slow")
    assert ident({"rmsnorm.py": TWO, "manifest.toml": a}) == ident({"rmsnorm.py": TWO, "manifest.toml": c})


def test_parent_package_init_runs_before_the_entry() -> None:
    # importing pkg.main executes pkg/__init__.py first (here: ZeroDivisionError at import); the
    # same sources with the entry moved out of the package never run it
    main = "from .impl import f\n\n\ndef rmsnorm(x, weight, out, eps):\n    out.copy_(f(x, 2.0))\n"
    impl = "def f(v, k):\n    return v - k\n"
    inside = ident(
        {
            "pkg/__init__.py": "X = 1 // 0\n",
            "pkg/main.py": main,
            "pkg/impl.py": impl,
            "manifest.toml": MAN.replace('entry = "rmsnorm:rmsnorm"', 'entry = "pkg.main:rmsnorm"'),
        }
    )
    outside = ident({"pkg/__init__.py": "X = 1 // 0\n", "main.py": main, "impl.py": impl, "manifest.toml": MAIN_MAN})
    assert inside is not None and inside != outside


def test_a_kept_name_spelled_like_a_canonical_name_does_not_collide() -> None:
    # `g1` is named in a string, so it keeps its spelling; A is renamed by position, to g1 once
    s1 = "def rmsnorm(x, weight, out, eps):\n    out.copy_(x * A)\n\n\nA = 2.0\ng1 = 3.0\nS = 'g1'\n"
    s2 = s1.replace("x * A", "x * g1")
    assert ident({"main.py": s1, "manifest.toml": MAIN_MAN}) != ident({"main.py": s2, "manifest.toml": MAIN_MAN})


def test_a_run_that_reads_a_def_before_binding_it_is_not_merged_with_its_fix() -> None:
    # Red team 2026-12-04: the entry annotated with a helper def defined *after* it is a NameError at
    # import (verify FAILs it); moving the helper above the entry fixes it. The fixed run is
    # order-free, so it was sorted, and sorted it came out in the broken order (the entry's shape
    # sorts before the helper's), while the broken run was kept as written: both had one identity,
    # and the fix (anyone's, the same miner's own re-commit too) was settled as a copy of the FAIL.
    head, sep, wrapper = SRC.partition("\n\ndef rmsnorm(")
    helper = "\n\ndef _eps_kind(value: float) -> float:\n    return value\n"
    entry = sep + wrapper.replace("eps: float) -> None:", "eps: _eps_kind) -> None:", 1)
    assert "eps: _eps_kind" in entry
    fixed = ident({"rmsnorm.py": head + helper + entry, "manifest.toml": MAN})
    broken = ident({"rmsnorm.py": head + entry + helper, "manifest.toml": MAN})
    assert fixed is not None and broken is not None and fixed != broken
    # the order-free fix is still a copy of itself reordered validly (helper first, then the kernel)
    kern_start = head.index("@triton.jit")
    moved = head[:kern_start] + helper.lstrip("\n") + "\n\n" + head[kern_start:] + entry
    assert ident({"rmsnorm.py": moved, "manifest.toml": MAN}) == fixed
