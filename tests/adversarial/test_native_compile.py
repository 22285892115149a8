"""Compile-time attacks on the CUDA lane (issue 32, item 6): each ends refused or FAIL with its
reason, and the host is unharmed (no file read back, nothing left behind, nothing written outside).

Three layers meet an attack: the lexical pre-scan (native/scan.py: clear reasons, before nvcc
runs), the wall around nvcc and ptxas with its limits (native/lane.py), and the dependency check
after the compile. The "bypass" cases skip the pre-scan on purpose, to show the layers behind it
hold on their own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "native"))
from native_bundles import SCALE, SCALE_DECL, cuda_bundle, needs_nvcc  # noqa: E402

from cacheon_subnet.bundle import bundle_from_files  # noqa: E402
from cacheon_subnet.errors import ManifestError  # noqa: E402
from native import BuildOptions, CompileBudget, CompileRefused, Stage, build_op  # noqa: E402

SMALL = CompileBudget(cpu_s=5, wall_s=60, memory_bytes=1 << 30, output_bytes=4 << 20, tmp_bytes=64 << 20)


def macro_bomb(levels: int) -> str:
    """2**levels statements from `levels` lines: a tiny source, a huge translation unit."""
    defs = "#define X0 s += i[k++] * a;\n" + "".join(f"#define X{j + 1} X{j} X{j}\n" for j in range(levels))
    body = f"{{ float s = 0.f; int k = 0; X{levels} o[0] = s; }}"
    return defs + f'extern "C" __global__ void scale(float* o, const float* i, int n, float a) {body}\n'


@pytest.fixture
def lane(tmp_path):
    """build_op on a fresh cache; afterwards: no scratch of this process left, no artifact for a refusal."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    before = set(tmp.glob(f"cacheon-native-p{os.getpid()}.*"))
    cache = tmp_path / "cache"

    def build(bundle, budget: CompileBudget = SMALL):
        return build_op(bundle, bundle.manifest.ops[0], BuildOptions(cache_dir=cache, budget=budget))

    yield build
    assert set(tmp.glob(f"cacheon-native-p{os.getpid()}.*")) == before, "the lane left its scratch behind"
    assert not list(cache.glob("artifacts/*")), "a refused build left an artifact"


def refused(build, bundle, budget: CompileBudget = SMALL) -> CompileRefused:
    with pytest.raises(CompileRefused) as e:
        build(bundle, budget)
    assert "root:x:0:0" not in e.value.text() and "cacheon-native" not in e.value.text(), e.value.text()
    return e.value


# -- refused by the pre-scan, before nvcc runs (no toolchain needed) ------------------------------
SCAN_ATTACKS = {
    "include_etc_passwd": ('#include "/etc/passwd"\n', "absolute paths"),
    "include_dev_zero": ("#include </dev/zero>\n", "absolute paths"),
    "include_proc_self": ('#include "/proc/self/environ"\n', "absolute paths"),
    "dotdot_escape": ('#include "../../../../etc/passwd"\n', "'..'"),
    "include_the_out_dir": ('#include "../out/deps.d"\n', "'..'"),
    "include_through_a_macro": ('#define F "/etc/passwd"\n#include F\n', "not through a macro"),
    "include_next": ("#include_next <cuda_runtime.h>\n", "#include_next is not allowed"),
    "embed": ('#embed "/etc/passwd"\n', "#embed is not allowed"),
    "has_include_probe": ("#if __has_include(</etc/shadow>)\n#endif\n", "__has_include is not allowed"),
    "splice_hidden": ('#inc\\\nlude "/etc/passwd"\n', "absolute paths"),
    "comment_hidden": ('#include /*\n*/ "/etc/passwd"\n', "absolute paths"),
    "digraph_hidden": ('%:include "/etc/passwd"\n', "absolute paths"),
    "trigraph_hidden": ('??=include "/etc/passwd"\n', "trigraph"),
    "flags_via_pragma": ('#pragma GCC optimize("O0")\n', "compiler settings are the validator's"),
    "flags_via_pragma_operator": ('_Pragma("nv_diag_suppress 177")\n', "_Pragma is not allowed"),
    "forged_line": ('#line 1 "w.py"\n', "forge the file:line"),
    "raw_string_lexing": ('const char* s = R"x(\n#include "/etc/passwd"\n)x";\n', "raw string"),
}


@pytest.mark.parametrize("name", sorted(SCAN_ATTACKS))
def test_the_pre_scan_refuses(lane, name):
    src, words = SCAN_ATTACKS[name]
    e = refused(lane, cuda_bundle(src + SCALE))
    assert e.stage is Stage.SCAN and e.rule == "native-scan" and words in e.text(), e.text()
    assert e.diagnostics[0].file == "k.cu" and e.diagnostics[0].line >= 1


@pytest.mark.parametrize("name", ["k -o x.cu", "-Xcompiler=-E.cu", "k;rm.cu", "k.cu\n.cu", "..cu", "k..cu"])
def test_flags_smuggled_through_file_names_are_refused_by_the_manifest(name):
    files = {"k.cu": SCALE.encode(), "w.py": b"def rmsnorm(x, weight, out, eps):\n    pass\n"}
    text = cuda_bundle().files["manifest.toml"].decode().replace('["k.cu"]', f"[{name!r}]".replace("'", '"'))
    with pytest.raises(ManifestError) as e:
        bundle_from_files({**files, "manifest.toml": text.encode()})
    assert e.value.field == "ops[0].cuda.sources" and "no dash, space, dot" in str(e.value), str(e.value)


# -- the layers behind the pre-scan, bypassing it -------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("include", ["/etc/hostname", "/etc/os-release", "/dev/null", "../out/deps.d"])
def test_a_read_outside_the_sources_is_refused_without_quoting_it(include):
    from native.lane import compile_unit
    from native.toolchain import locate

    if include.startswith("/") and not os.path.exists(include):
        pytest.skip(f"{include} does not exist on this host")
    src = f'#include "{include}"\n' + SCALE
    with pytest.raises(CompileRefused) as e:
        compile_unit({"k.cu": src.encode()}, "k.cu", "sm_90a", locate(), SMALL)
    text = e.value.text()
    if include.startswith("/"):  # in the wall's view (read-only): read, then refused by name
        assert e.value.stage is Stage.DEPS and f"the compile read {include}, outside the op's sources" in text, text
        assert include == "/dev/null" or Path(include).read_text().strip()[:40] not in text, "content quoted back"
    else:  # the out dir holds nothing while the preprocessor runs: the PTX and deps are written after it
        assert e.value.stage is Stage.COMPILE and "No such file" in text, text


@needs_nvcc
def test_the_host_tmp_is_not_in_the_view(tmp_path):
    from native.lane import compile_unit
    from native.toolchain import locate

    secret = Path("/tmp") / f"cacheon-native-canary-{os.getpid()}.cuh"
    secret.write_text("#error the canary was read\n")
    os.chmod(secret, 0o644)
    try:
        with pytest.raises(CompileRefused) as e:
            compile_unit({"k.cu": f'#include "{secret}"\n{SCALE}'.encode()}, "k.cu", "sm_90a", locate(), SMALL)
        assert "No such file" in e.value.text() and "canary was read" not in e.value.text(), e.value.text()
    finally:
        secret.unlink()


# -- bombs: the front end's own limits, then the lane's ---------------------------------------------
TEMPLATE_BOMB = (
    "template <int N> struct B { using t = typename B<N + 1>::t; };\n__device__ int f() { return sizeof(B<0>); }\n"
)
CONSTEXPR_BOMB = (
    "constexpr unsigned long long spin(unsigned long long n) { unsigned long long s = 0;"
    " for (unsigned long long i = 0; i < n; ++i) s += i * i; return s; }\n"
    "constexpr unsigned long long g = spin(1ull << 40);\n"
)


@needs_nvcc
@pytest.mark.parametrize(
    "src,words", [(TEMPLATE_BOMB, "excessive recursion"), (CONSTEXPR_BOMB, "excessive constexpr function call complexity")]
)
def test_template_and_constexpr_bombs_stop_at_the_front_end(lane, src, words):
    e = refused(lane, cuda_bundle(src + SCALE))
    assert e.stage is Stage.COMPILE and words in e.text() and e.diagnostics[0].file == "k.cu", e.text()


def _budget(**kw) -> CompileBudget:
    base = {"cpu_s": 60, "wall_s": 60, "memory_bytes": 4 << 30, "output_bytes": 256 << 20, "tmp_bytes": 512 << 20}
    return CompileBudget(**{**base, **kw})


@needs_nvcc
@pytest.mark.parametrize(
    "levels,budget,words",
    [
        (22, _budget(output_bytes=4 << 20), "output limit (4 MiB per file)"),
        pytest.param(16, _budget(memory_bytes=400 << 20), "memory limit (400 MiB", marks=pytest.mark.slow),
        (18, _budget(wall_s=1), "wall time limit (1 s)"),
        pytest.param(18, _budget(cpu_s=2), "CPU time limit (2 s)", marks=pytest.mark.slow),
    ],
    ids=["output", "memory", "wall", "cpu"],
)
def test_a_huge_translation_unit_stops_at_the_lane_limit_it_hits(lane, levels, budget, words):
    e = refused(lane, cuda_bundle(macro_bomb(levels)), budget)
    assert e.stage is Stage.LIMIT and words in e.text(), e.text()


@needs_nvcc
@pytest.mark.slow
def test_a_huge_static_array_stops_at_the_output_limit(lane):
    e = refused(lane, cuda_bundle("__device__ int big[1 << 24] = {1, 2, 3};\n" + SCALE))
    assert e.stage is Stage.LIMIT and "ptxas stopped at its output limit" in e.text(), e.text()


# -- the kernel ABI: what the launcher would be handed ---------------------------------------------
@needs_nvcc
@pytest.mark.parametrize(
    "src,decl,words",
    [
        (SCALE + "__global__ void hidden(int* p) { p[0] = 1; }\n", SCALE_DECL, "C++-mangled entry"),
        (
            SCALE + "template <int N> __global__ void t(int* p) { p[0] = N; }\ntemplate __global__ void t<1>(int*);\n",
            SCALE_DECL,
            "C++-mangled entry",
        ),
        (SCALE + 'extern "C" __global__ void extra(int* p) { p[0] = 1; }\n', SCALE_DECL, "extra is not declared"),
        (SCALE.replace("int n", "long long n"), SCALE_DECL, "parameter 2: declared i32 (a b32 in PTX), compiled as b64"),
        (SCALE, 'scale = ["ptr", "ptr", "i32"]', "declared 3 parameters"),
        (SCALE, f'{SCALE_DECL}, ghost = ["ptr"]', "ghost is declared in [ops.cuda.kernels] but no source defines"),
        (
            'struct S { int a; float b; };\nextern "C" __global__ void scale(S s, float* o) { o[0] = s.b; }\n',
            'scale = ["u64", "ptr"]',
            "compiled as a by-value struct or array of 8 bytes",
        ),
    ],
    ids=["plain_global", "template", "undeclared", "param_mismatch", "count_mismatch", "missing", "by_value_struct"],
)
def test_kernel_abi_mismatches_are_refused(lane, src, decl, words):
    e = refused(lane, cuda_bundle(src, decl))
    assert e.stage is Stage.KERNELS and words in e.text(), e.text()


@needs_nvcc
@pytest.mark.parametrize(
    "src,line,pragma",
    [
        ('#define CAT(a, b) a##b\nCAT(_Pra, gma)("nv_diag_suppress 177")\n', 2, "nv_diag_suppress 177"),
        ("#include <algorithm>\n_PSTL_PRAGMA(STDC FP_CONTRACT OFF)\n", 2, "STDC FP_CONTRACT OFF"),
    ],
    ids=["token_pasting", "header_macro"],
)
def test_a_pragma_through_a_macro_is_refused_after_preprocessing(lane, src, line, pragma):
    e = refused(lane, cuda_bundle(src + SCALE))
    assert e.stage is Stage.SCAN and f"k.cu:{line}: a #pragma {pragma!r} reached the compiler through a macro" in e.text()
