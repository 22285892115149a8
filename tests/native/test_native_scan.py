"""The lexical pre-scan (native/scan.py): every directive checked, read as the preprocessor reads it."""

from __future__ import annotations

import pytest

from cacheon_subnet.bundle.limits import CudaLimits
from native.scan import logical_lines, scan_sources

SOURCES = frozenset({"k.cu", "kernels/common.cuh", "kernels/x.cu"})
BUNDLE = SOURCES | {"notes.cuh", "w.py"}


def findings(text: str, path: str = "k.cu") -> list[str]:
    sources = {p: b"" for p in SOURCES} | {path: text.encode()}
    return [d.render() for d in scan_sources(sources, BUNDLE)]


CLEAN = """// a kernel with everything the scan must read past: #include "/etc/passwd" in a comment
#pragma once
#include <cuda_bf16.h>
#include <cute/tensor.hpp>
#include "kernels/common.cuh"
#define N 1'000'000
/* a block comment: #pragma GCC optimize("O0") */
__device__ const char* s = "/* not a comment // nor this */ #include \\"/etc/passwd\\"";
__device__ char c = '"';
extern "C" __global__ void k(float* p) {
  #pragma unroll 4
  for (int i = 0; i < 4; ++i) p[i] = 0x1'0;
  #pragma nounroll
  for (int i = 0; i < N; ++i) p[i] = 1;
}
"""


def test_a_clean_source_passes():
    assert findings(CLEAN) == []
    assert findings('#include "common.cuh"\n', "kernels/x.cu") == []  # relative to the including file


@pytest.mark.parametrize(
    "text,words",
    [
        ('#include "/etc/passwd"\n', "absolute paths"),
        ("#include </dev/zero>\n", "absolute paths"),
        ('#include "/proc/self/environ"\n', "absolute paths"),
        ('#include "../../etc/passwd"\n', "'..'"),
        ('#include "kernels/../../out/unit.ptx"\n', "'..'"),
        ("#include <./k.cu>\n", "'.'"),
        ("#include P\n", "not through a macro"),
        ("#include_next <cuda.h>\n", "#include_next is not allowed"),
        ('#import "x.cuh"\n', "#import is not allowed"),
        ('#embed "/etc/passwd"\n', "#embed is not allowed"),
        ('#line 1 "w.py"\n', "forge the file:line"),
        ('# 1 "w.py"\n', "forge the file:line"),
        ('#pragma GCC optimize("O0")\n', "compiler settings are the validator's"),
        ("#pragma nv_diag_suppress 177\n", "compiler settings are the validator's"),
        ("#pragma once extra\n", "not allowed"),
        ("#pragma STDC\n", "compiler settings are the validator's"),
        ('_Pragma("GCC optimize(\\"O0\\")")\n', "_Pragma is not allowed"),
        ("#if __has_include(</etc/shadow>)\n#endif\n", "__has_include is not allowed"),
        ("??=include <x>\n", "trigraph"),
        ('const char* s = R"(x)";\n', "raw string"),
        ("/* never closed\n", "unterminated"),
        ('#include "notes.cuh"\n', "not in this op's [ops.cuda] sources"),
        ('#include "kernels/x.cu"\n', "only .cuh headers"),
        ('#include "a b.h"\n', "letters, digits"),
    ],
)
def test_each_refusal_names_the_line_and_why(text, words):
    got = findings("int a;\n" + text)
    assert got and all(g.startswith("k.cu:2: ") for g in got) and any(words in g for g in got), got


@pytest.mark.parametrize(
    "text",
    [
        '#inc\\\nlude "/etc/passwd"\n',  # a line splice inside the directive name
        '#include /*\n*/ "/etc/passwd"\n',  # a comment spanning lines joins them (phase 3)
        '%:include "/etc/passwd"\n',  # the digraph of #
        '  #  include "/etc/passwd"\n',  # spaces around the #
        '/**/#include "/etc/passwd"\n',  # a comment before the #
    ],
)
def test_directives_hidden_by_lexing_tricks_are_seen(text):
    got = findings(text)
    assert any("absolute paths" in g for g in got), got


def test_a_crlf_file_is_read_and_a_lone_cr_is_refused():
    assert findings('#include "kernels/common.cuh"\r\nint a;\r\n') == []
    assert any("carriage return" in g for g in findings('int a;\r#include "/etc/passwd"\n'))


def test_sizes_are_bounded_before_any_parse():
    limits = CudaLimits(source_bytes=10, total_bytes=15)
    got = [d.render() for d in scan_sources({"k.cu": b"x" * 11, "kernels/x.cu": b"y" * 9}, BUNDLE, limits)]
    assert any("k.cu: 11 bytes > 10" in g for g in got) and any("20 bytes > 15" in g for g in got), got


def test_line_numbers_survive_splices_and_block_comments():
    lines, problem = logical_lines("a\\\nb\n/* x\ny */ c\n#include <z>\n")
    assert problem is None
    assert [(ln.text.strip(), ln.no) for ln in lines][:3] == [("ab", 1), ("c", 3), ("#include <z>", 5)]
