"""nvcc and ptxas behind the OS wall: one translation unit -> its PTX and its cubin.

Why the wall: nvcc parses hostile C++ (its preprocessor opens files, its front ends allocate
and recurse at the source's command), so it runs as a sandboxed child like any contribution
code (cacheon_subnet/sandbox: its own uid, no network, no capabilities, seccomp, an allowlist
view where the bundle's sources are read-only and only a private out dir is writable), under
RLIMIT_CPU, RLIMIT_AS and RLIMIT_FSIZE and a wall deadline the host enforces. Where the wall
cannot be established the launch fails closed (SandboxError, said as a NativeError) unless the
operator chose weak mode, which the sandbox says loudly at every launch.

The flags are the validator's (FLAGS): nothing in a bundle reaches the command line but its
source paths, which the manifest already held to a strict pattern. After the compile, nvcc's
own dependency list (-MD) must name only the op's sources and the validator's header dirs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet import sandbox
from cacheon_subnet.bundle import Scratch
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.sandbox.logsink import LogSink
from native.diag import CompileRefused, Diagnostic, NativeError, Stage, parse_output, redact
from native.scan import preprocessed_pragmas
from native.toolchain import Toolchain

DEFAULT_ARCH = "sm_90a"  # the H200 (Hopper, with wgmma/TMA: the `a` features)
# Validator-owned, fixed: the language level, the device front end's constexpr rule CUTLASS needs.
FLAGS = ("-ptx", "-std=c++17", "--expt-relaxed-constexpr")
PTXAS_FLAGS = ("-m64", "-O3")
OUTPUT_HEAD = 64 << 10  # bytes of a failed compile's output read for diagnostics
OUTPUT_LIMIT = 256 << 20  # bytes of a preprocessed unit the host reads (RLIMIT_FSIZE bounds it first)


@dataclass(frozen=True)
class CompileBudget:
    """Limits of each nvcc / ptxas run (each process of it: RLIMIT_CPU, RLIMIT_AS are per process)."""

    cpu_s: int = 120  # CPU seconds (a CuTe GEMM front end takes ~10-30 s; a template bomb stops here)
    wall_s: float = 300.0  # from launch to exit, enforced by the host
    memory_bytes: int = 4 << 30  # address space (a constexpr bomb that allocates stops here)
    output_bytes: int = 64 << 20  # any one file written (RLIMIT_FSIZE): the PTX of a giant unroll
    tmp_bytes: int = 64 << 20  # /tmp inside the view (a private tmpfs); nvcc keeps its files in the out dir


@dataclass(frozen=True)
class UnitBuild:
    source: str  # the translation unit, bundle-relative
    ptx: str
    cubin: bytes
    commands: tuple[tuple[str, ...], ...]  # nvcc, ptxas: as run, paths written $CUDA, $OUT/, $CXX
    headers: tuple[str, ...]  # what the preprocessor read (bundle paths, or <cuda>/..., <system>/...)


def compile_unit(sources: Mapping[str, bytes], unit: str, arch: str, tc: Toolchain, budget: CompileBudget) -> UnitBuild:
    """`unit` (one of `sources`) compiled for `arch` behind the wall; CompileRefused on any failure."""
    scratch = Scratch("cacheon-native-")
    try:
        os.chmod(scratch.path, 0o755)  # the sandbox uid must search down to src/ and out/
        src, out = scratch.path / "src", scratch.path / "out"
        _stage(src, sources)
        out.mkdir(mode=0o755)
        (out / "keep").mkdir(mode=0o755)
        roots = _roots(src, out, tc)
        nvcc = [
            str(tc.nvcc),
            *FLAGS,
            f"-arch={arch}",
            f"-ccbin={tc.host_cxx}",
            "-I.",
            *([f"-I{tc.cutlass_include}"] if tc.cutlass_include else []),
            "-MD",
            "-MF",
            f"{out}/deps.d",
            "--keep",  # the preprocessed unit (*.cpp1.ii), for the pragma check
            f"--keep-dir={out}/keep",
            "-o",
            f"{out}/unit.ptx",
            unit,
        ]
        run = _Run(scratch.path, src, out, tc, budget)
        ptx_name = {"<out>/unit.ptx": f"<ptx of {unit}>"}
        done = run(nvcc, "nvcc")
        if done.rc != 0 or not (out / "unit.ptx").is_file():
            raise CompileRefused(*_failure(done, roots, budget, ptx_name))
        headers = check_deps(out / "deps.d", src, sources, tc, roots)
        check_pragmas(out / "keep", frozenset(sources))
        ptxas = [str(tc.ptxas), f"-arch={arch}", *PTXAS_FLAGS, f"{out}/unit.ptx", "-o", f"{out}/unit.cubin"]
        done = run(ptxas, "ptxas")
        if done.rc != 0 or not (out / "unit.cubin").is_file():
            stage, diags = _failure(done, roots, budget, ptx_name)
            raise CompileRefused(Stage.ASSEMBLE if stage is Stage.COMPILE else stage, diags)
        return UnitBuild(
            unit,
            (out / "unit.ptx").read_text(errors="replace"),
            (out / "unit.cubin").read_bytes(),
            (_shown(nvcc, tc, out), _shown(ptxas, tc, out)),
            headers,
        )
    finally:
        sandbox.remove_tree(scratch.path)
        scratch.cleanup()


def _stage(src: Path, sources: Mapping[str, bytes]) -> None:
    """The op's sources and nothing else, read-only."""
    src.mkdir(mode=0o755)
    for path, data in sorted(sources.items()):
        dest = src.joinpath(*path.split("/"))
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        dest.write_bytes(data)
        dest.chmod(0o444)
    for d, _, _ in os.walk(src):
        os.chmod(d, 0o555)


def _roots(src: Path, out: Path, tc: Toolchain) -> dict[str, str]:
    roots = {str(src): "", str(out): "<out>", str(tc.root): "<cuda>"}
    if tc.cutlass_include:
        roots[str(tc.cutlass_include)] = "<cutlass>"
    return roots


def _shown(argv: Sequence[str], tc: Toolchain, out: Path) -> tuple[str, ...]:
    """The command as recorded in the descriptor: no host-specific paths."""
    subs = {str(out): "$OUT", str(tc.root): "$CUDA", str(tc.host_cxx): "$CXX"}
    if tc.cutlass_include:
        subs[str(tc.cutlass_include)] = "$CUTLASS"
    shown = []
    for a in argv:
        for host, name in subs.items():
            a = a.replace(host, name)
        shown.append(a)
    return tuple(shown)


@dataclass(frozen=True)
class Ran:
    what: str  # "nvcc" | "ptxas"
    rc: int | None  # None: killed at the wall deadline
    text: str  # the head of its output (stdout and stderr)
    wall_s: float


class _Run:
    """One walled child: argv in src/ (read-only) with out/ writable."""

    def __init__(self, base: Path, src: Path, out: Path, tc: Toolchain, budget: CompileBudget) -> None:
        self.base, self.src, self.out, self.tc, self.budget = base, src, out, tc, budget
        self.n = 0

    def __call__(self, argv: list[str], what: str) -> Ran:
        self.n += 1
        b = self.budget
        policy = sandbox.SandboxPolicy(
            wall_timeout_s=b.wall_s,
            cpu_seconds=b.cpu_s,
            address_space_bytes=b.memory_bytes,
            file_bytes=b.output_bytes,
            open_files=256,
            max_processes=32,
            scratch_bytes=16 << 20,
            tmp_bytes=b.tmp_bytes,
            inodes=4096,
            ro_paths=(str(self.src), *(str(p) for p in (self.tc.root, self.tc.cutlass_include) if p)),
            rw_paths=(str(self.out),),
            # nvcc reads NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS: the flags stay the validator's
            extra_env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "NVCC_PREPEND_FLAGS": "", "NVCC_APPEND_FLAGS": ""},
        )
        log = LogSink(self.base / f"{what}-{self.n}.log", cap=1 << 20)
        t0 = time.monotonic()
        try:
            proc = sandbox.launch(
                argv,
                scratch=self.base / f"work-{self.n}",
                policy=policy,
                stdout=log.fileno(),
                stderr=log.fileno(),
                cwd=self.src,
            )
        except SandboxError as e:
            log.close()
            raise NativeError(f"the compile lane cannot start {what} behind the sandbox wall: {e}") from None
        finally:
            log.writer_passed()
        try:
            rc: int | None = proc.wait(timeout=max(0.0, t0 + b.wall_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            sandbox.stop(proc, grace_s=0.0)
            log.close()
        with open(log.path, "rb") as f:
            head = f.read(OUTPUT_HEAD).decode("utf-8", "replace")
        return Ran(what, rc, head, time.monotonic() - t0)


def _limit(ran: Ran, budget: CompileBudget) -> str | None:
    """Which of the lane's limits stopped `ran`, in words, or None. RLIMIT_CPU is set soft = hard,
    so the kernel ends a process over it with SIGKILL; a SIGKILL before that much wall time has
    passed cannot be the CPU limit (CPU time never runs ahead of wall time for one process)."""
    low, rc, what = ran.text.lower(), ran.rc, ran.what
    if rc is None:
        return f"{what} ran past its wall time limit ({budget.wall_s:g} s)"
    killed = {-int(signal.SIGKILL), 128 + int(signal.SIGKILL)}
    if rc in (-int(signal.SIGXCPU), 128 + int(signal.SIGXCPU)) or (rc in killed and ran.wall_s >= budget.cpu_s):
        return f"{what} stopped at its CPU time limit ({budget.cpu_s} s)"
    if "no space left on device" in low:
        return f"{what} stopped at its temp space limit ({budget.tmp_bytes >> 20} MiB)"
    if rc in (-int(signal.SIGXFSZ), 128 + int(signal.SIGXFSZ)) or "file size limit exceeded" in low or "signal 25" in low:
        return f"{what} stopped at its output limit ({budget.output_bytes >> 20} MiB per file)"
    if any(s in low for s in ("out of memory", "bad_alloc", "cannot allocate memory", "memory exhausted")):
        return f"{what} stopped at its memory limit ({budget.memory_bytes >> 20} MiB of address space)"
    return None


def _failure(
    ran: Ran, roots: dict[str, str], budget: CompileBudget, ptx_names: dict[str, str]
) -> tuple[Stage, list[Diagnostic]]:
    """The stage and diagnostics of a failed run: a limit when one was hit, else the compiler's words."""
    limit = _limit(ran, budget)
    if limit:
        return Stage.LIMIT, [Diagnostic("", 0, limit)]
    rc, text, what = ran.rc, ran.text, ran.what
    assert rc is not None
    diags = parse_output(text, roots, ptx_names)
    outside = sorted({d.file for d in diags if d.file.startswith("/")})
    if outside:  # defence in depth behind scan.py: never quote a host file back, name it
        return Stage.DEPS, [_outside(p) for p in outside]
    crash = {int(s) for s in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)}
    if -rc in crash or rc - 128 in crash:  # bwrap reports a signalled child as 128 + signal; nvcc fails with 1 or 255
        diags.append(Diagnostic("", 0, f"{what} was killed by signal {-rc if rc < 0 else rc - 128}"))
    stage = Stage.ASSEMBLE if any(d.file.startswith("<ptx of ") for d in diags) else Stage.COMPILE
    return stage, diags or [Diagnostic("", 0, f"{what} exited {rc}: {redact(text, roots)[-300:]!r}")]


def check_deps(deps: Path, src: Path, sources: Mapping[str, bytes], tc: Toolchain, roots: dict[str, str]) -> tuple[str, ...]:
    """The files nvcc's preprocessing read (-MD), each one of the op's sources or under a
    validator header dir; CompileRefused(DEPS) names any other."""
    try:
        with open(deps, "rb") as f:
            text = f.read(8 << 20).decode("utf-8", "replace")
    except OSError:
        raise CompileRefused(Stage.DEPS, [Diagnostic("", 0, "nvcc wrote no dependency list")]) from None
    paths = text.replace("\\\n", " ").split(":", 1)[-1].replace("\\ ", "\0").split()
    allowed = [str(r) for r in tc.header_roots()]
    shown, bad = [], []
    for p in (q.replace("\0", " ") for q in paths):
        real = os.path.realpath(os.path.join(src, p))
        rel = os.path.relpath(real, os.path.realpath(src))
        if not rel.startswith("..") and rel in sources:
            shown.append(rel)
        elif any(real == r or real.startswith(r.rstrip("/") + "/") for r in allowed):
            shown.append(redact(real, roots))
        else:
            bad.append(_outside(redact(real, roots)))
    if bad:
        raise CompileRefused(Stage.DEPS, bad)
    return tuple(shown)


def check_pragmas(keep: Path, sources: frozenset[str]) -> None:
    """scan.preprocessed_pragmas over the unit's preprocessed output; CompileRefused(SCAN)."""
    found = sorted(keep.glob("*.cpp1.ii"))
    if len(found) != 1:
        raise CompileRefused(Stage.DEPS, [Diagnostic("", 0, "nvcc kept no single preprocessed unit to check")])
    with open(found[0], "rb") as f:
        text = f.read(OUTPUT_LIMIT).decode("utf-8", "replace")
    bad = preprocessed_pragmas(text, sources)
    if bad:
        raise CompileRefused(Stage.SCAN, bad)


def _outside(path: str) -> Diagnostic:
    return Diagnostic("", 0, f"the compile read {path}, outside the op's sources and the validator's header dirs")
