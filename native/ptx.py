"""Each kernel's symbol and parameter list, read from the PTX nvcc emitted, checked against the
manifest's declaration, and found again in the cubin ptxas assembled from that PTX.

Why the PTX: it is the last text form of the kernel's ABI (`.entry name(.param .u64 p0, ...)`):
the widths and classes the launcher must pack. Signedness and pointer-ness are gone there (ptr,
i64, u64 are all 64-bit integers), so the declaration says which it is and the check holds the
rest: the count, the order, the width and int-vs-float class of every parameter. Only
`extern "C"` entries can be declared; a C++-mangled entry (a template, a plain `__global__`) is
refused, as is any entry the manifest does not declare.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cacheon_subnet.bundle.cuda import KernelDecl
from native.diag import Diagnostic

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"(?m)^[ \t]*(?:\.(?:visible|weak|extern)[ \t]+)*\.entry[ \t]+([A-Za-z_$%][\w$%]*)[ \t]*\(([^)]*)\)")
_CLASSES = {"u64": "b64", "s64": "b64", "b64": "b64", "u32": "b32", "s32": "b32", "b32": "b32", "f32": "f32", "f64": "f64"}


@dataclass(frozen=True)
class PtxEntry:
    name: str
    params: tuple[str, ...]  # per parameter: "b64" | "b32" | "f32" | "f64", or what it is when none of those


def entries(ptx: str) -> list[PtxEntry]:
    """Every `.entry` of a PTX module, in order."""
    out = []
    for m in _ENTRY.finditer(_COMMENTS.sub(" ", ptx)):
        params = tuple(_param_class(p) for p in m[2].split(",") if p.strip())
        out.append(PtxEntry(m[1], params))
    return out


def _param_class(decl: str) -> str:
    """`.param .u64 k_param_0` -> "b64"; `.param .align 4 .b8 k_param_0[8]` -> "struct of 8 bytes"."""
    words = decl.split()
    array = re.search(r"\[(\d+)\]\s*$", decl)
    if array:
        return f"a by-value struct or array of {array[1]} bytes"
    types = [w[1:] for w in words if w.startswith(".") and w[1:] in _CLASSES]
    if types:
        return _CLASSES[types[0]]
    other = [w for w in words if w.startswith(".") and w not in (".param", ".ptr", ".global", ".align")]
    return f"a {other[-1][1:] if other else '?'} parameter"


def check(
    found: Mapping[str, Sequence[PtxEntry]], declared: Sequence[KernelDecl]
) -> tuple[list[Diagnostic], dict[str, str]]:
    """`found`: translation unit -> its PTX entries. Returns the findings and, when there are
    none, each declared kernel's translation unit."""
    out: list[Diagnostic] = []
    where: dict[str, str] = {}
    want = {k.name: k for k in declared}
    for unit, ents in sorted(found.items()):
        for e in ents:
            if e.name.startswith("_Z"):
                out.append(
                    Diagnostic(
                        unit,
                        0,
                        f"kernel {e.name} is a C++-mangled entry (a template or a plain __global__): only "
                        'extern "C" __global__ kernels can be declared and launched',
                    )
                )
            elif e.name in where:
                out.append(Diagnostic(unit, 0, f"kernel {e.name} is also defined in {where[e.name]}"))
            elif e.name not in want:
                out.append(Diagnostic(unit, 0, f'extern "C" kernel {e.name} is not declared in [ops.cuda.kernels]'))
            else:
                where[e.name] = unit
                out += _params(unit, e, want[e.name])
    for name in sorted(set(want) - set(where)):
        out.append(
            Diagnostic(
                "manifest.toml",
                0,
                f'kernel {name} is declared in [ops.cuda.kernels] but no source defines an extern "C" __global__ {name}',
            )
        )
    return out, where


def _params(unit: str, e: PtxEntry, decl: KernelDecl) -> list[Diagnostic]:
    names = ", ".join(p.value for p in decl.params)
    if len(e.params) != len(decl.params):
        return [
            Diagnostic(
                unit,
                0,
                f"kernel {e.name}: declared {len(decl.params)} parameters ({names}), the compiled entry has "
                f"{len(e.params)} ({', '.join(e.params)})",
            )
        ]
    return [
        Diagnostic(unit, 0, f"kernel {e.name} parameter {i}: declared {t.value} (a {t.ptx_class} in PTX), compiled as {got}")
        for i, (t, got) in enumerate(zip(decl.params, e.params))
        if t.ptx_class != got
    ]


def cubin_kernels(cubin: bytes) -> set[str]:
    """The functions whose code the cubin holds (its `.text.<name>` sections); empty when it is
    not a 64-bit little-endian ELF file."""
    if len(cubin) < 64 or cubin[:6] != b"\x7fELF\x02\x01":
        return set()
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > len(cubin):
        return set()

    def section(i: int) -> tuple[int, int, int]:
        name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        return name, off, size

    _, str_off, str_size = section(shstrndx)
    names = cubin[str_off : str_off + str_size]
    out = set()
    for i in range(shnum):
        at = section(i)[0]
        end = names.find(b"\0", at)
        name = names[at : end if end >= 0 else len(names)].decode("latin-1")
        if name.startswith(".text."):
            out.add(name[len(".text.") :])
    return out
