"""The slot ABI: a frozen, versioned contract a miner's kernel is written against.

A slot says *what* a chokepoint computes (argument list, dtypes, symbolic shapes, layouts,
scalar params, a high-precision reference and a tolerance policy), never *how* SGLang
computes it. Kernels use destination passing: every `out` argument is allocated by the
caller, `inout` arguments are updated in place, and the kernel returns None. That keeps
kernels CUDA-graph safe (no allocation of model-facing tensors) and lets the caller check
that every element was written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from cacheon_subnet.errors import SlotError

if TYPE_CHECKING:  # torch is imported where a tensor or torch dtype is made: parsing a spec needs none
    import torch

ROLES = ("in", "out", "inout", "scratch")
LAYOUTS = ("contiguous", "rows")  # rows: last dim contiguous, any outer strides (views)

# the ABI's dtype names; each is also the name of its torch dtype (torch.bfloat16, ...)
DTYPE_NAMES = ("bfloat16", "float16", "float32", "int32", "int64", "bool")
_DTYPE_SET = frozenset(DTYPE_NAMES)
SHORT_DTYPE = MappingProxyType(
    {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int32": "i32", "int64": "i64", "bool": "bool"}
)

_DIM_RE = re.compile(r"^(?:(?P<mul>\d+)\*)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\+(?P<add>\d+))?$")


_torch_dtypes: Mapping[str, torch.dtype] | None = None


def torch_dtypes() -> Mapping[str, torch.dtype]:
    """ABI dtype name -> torch dtype. Imports torch on first call (the catalog and the manifest
    parser only check names, so `cacheon digest` and friends never load it)."""
    global _torch_dtypes
    if _torch_dtypes is None:
        import torch

        _torch_dtypes = MappingProxyType({name: getattr(torch, name) for name in DTYPE_NAMES})
    return _torch_dtypes


def check_dtype_name(name: str) -> None:
    if name not in _DTYPE_SET:  # a set, as the mapping dtype_of reads: an unhashable name is a TypeError
        raise SlotError(f"unknown dtype {name!r} (known: {', '.join(DTYPE_NAMES)})")


def dtype_of(name: str) -> torch.dtype:
    try:  # on the seam's eager dispatch path: one lookup once torch_dtypes() has run
        return (_torch_dtypes or torch_dtypes())[name]
    except KeyError:
        raise SlotError(f"unknown dtype {name!r} (known: {', '.join(DTYPE_NAMES)})") from None


def dtype_name(dt: torch.dtype) -> str:
    for k, v in torch_dtypes().items():
        if v == dt:
            return k
    raise SlotError(f"dtype {dt} is not part of the slot ABI")


@dataclass(frozen=True)
class DimExpr:
    """One symbolic extent: `NAME`, `k*NAME` or `NAME+k` (e.g. `2*D`, `B+1`)."""

    name: str
    mul: int = 1
    add: int = 0

    @classmethod
    def parse(cls, text: str) -> DimExpr:
        m = _DIM_RE.fullmatch(text.replace(" ", ""))
        if not m:
            raise SlotError(f"bad symbolic dim {text!r}: use NAME, k*NAME or NAME+k")
        return cls(m["name"], int(m["mul"] or 1), int(m["add"] or 0))

    def size(self, dims: Mapping[str, int]) -> int:
        if self.name not in dims:
            raise SlotError(f"dim {self.name!r} is not bound (have {sorted(dims)})")
        return self.mul * dims[self.name] + self.add

    def solve(self, extent: int) -> int | None:
        """The value of NAME that gives `extent`, or None when none does."""
        v = extent - self.add
        if v < 0 or v % self.mul:
            return None
        return v // self.mul

    def __str__(self) -> str:
        s = f"{self.mul}*{self.name}" if self.mul != 1 else self.name
        return f"{s}+{self.add}" if self.add else s


@dataclass(frozen=True)
class ArgSpec:
    """One tensor argument. `dtype` is "act" (the op dtype under test) or a fixed dtype name."""

    name: str
    role: str
    dtype: str
    shape: tuple[str, ...]
    layout: str = "contiguous"
    graph_dynamic: bool = False
    doc: str = ""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise SlotError(f"arg {self.name}: role {self.role!r} not in {ROLES}")
        if self.layout not in LAYOUTS:
            raise SlotError(f"arg {self.name}: layout {self.layout!r} not in {LAYOUTS}")
        if self.dtype != "act":
            check_dtype_name(self.dtype)
        # parsed once: the seam's dispatch reads them on every eager call (57 per forward)
        object.__setattr__(self, "_dims", tuple(DimExpr.parse(d) for d in self.shape))

    @property
    def dims(self) -> tuple[DimExpr, ...]:
        return self._dims  # type: ignore[attr-defined]

    def torch_dtype(self, act: torch.dtype) -> torch.dtype:
        return act if self.dtype == "act" else dtype_of(self.dtype)

    def concrete_shape(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(d.size(dims) for d in self.dims)

    @property
    def written(self) -> bool:
        return self.role in ("out", "inout")


@dataclass(frozen=True)
class ParamSpec:
    """A scalar parameter passed by keyword (eps, sm_scale, renormalize...)."""

    name: str
    kind: str  # "float" | "int" | "bool"
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("float", "int", "bool"):
            raise SlotError(f"param {self.name}: kind {self.kind!r} not in float/int/bool")


@dataclass(frozen=True)
class Tolerance:
    """|out - ref| <= atol + rtol*|ref| must hold for at least `min_matched` of the elements,
    and, when set, the relative L2 error ||out-ref||/||ref|| must stay under `max_rel_l2`
    (catches a small systematic bias that hides under atol). `exact` is for integer outputs."""

    atol: float = 0.0
    rtol: float = 0.0
    min_matched: float = 1.0
    max_rel_l2: float | None = None
    exact: bool = False


# Defaults from public kernel competitions (field notes): bf16 0.02, fp16 0.01, fp32 1e-5.
DEFAULT_TOLERANCES: Mapping[str, Tolerance] = MappingProxyType(
    {
        "bfloat16": Tolerance(atol=2e-2, rtol=2e-2, max_rel_l2=1e-2),
        "float16": Tolerance(atol=1e-2, rtol=1e-2, max_rel_l2=2e-3),
        "float32": Tolerance(atol=1e-5, rtol=1e-5, max_rel_l2=1e-5),
    }
)


@dataclass(frozen=True)
class ShapeCase:
    """Concrete extents + params for one workload point, derived from a model profile."""

    label: str
    profile: str
    dims: Mapping[str, int]
    params: Mapping[str, Any]
    # model constants the inputs need but the kernel is not passed (rope_theta): a case re-targeted
    # to a checkpoint's profile carries them, so no process has to look its profile up by name
    constants: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", MappingProxyType(dict(self.dims)))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "constants", MappingProxyType(dict(self.constants)))

    def to_json(self) -> dict[str, Any]:
        doc = {"label": self.label, "profile": self.profile, "dims": dict(self.dims), "params": dict(self.params)}
        if self.constants:
            doc["constants"] = dict(self.constants)
        return doc


# (torch names quoted: these aliases are built at import time, before any torch is loaded)
Tensors = Mapping[str, "torch.Tensor"]
Reference = Callable[[Tensors, Mapping[str, Any]], dict[str, "torch.Tensor"]]
InputMaker = Callable[[ShapeCase, "torch.dtype", "torch.Generator"], dict[str, "torch.Tensor"]]
CaseBuilder = Callable[[str], list[ShapeCase]]
Canonicalizer = Callable[[dict[str, "torch.Tensor"]], dict[str, "torch.Tensor"]]
# Collective slots: inputs for every rank of a world (one dict per rank), and the expected
# outputs of every rank computed from all of them at once.
RankInputMaker = Callable[[ShapeCase, "torch.dtype", "torch.Generator", int], list[dict[str, "torch.Tensor"]]]
RankReference = Callable[[Sequence[Tensors], Mapping[str, Any]], list[dict[str, "torch.Tensor"]]]
GROUP_ARG = "group"  # keyword a collective kernel receives its torch.distributed ProcessGroup under

TIERS = ("verify", "gpu", "bench")


@dataclass(frozen=True)
class SlotSpec:
    """A versioned slot. Bump `version` for any change a correct kernel could notice."""

    id: str
    version: int
    summary: str
    args: tuple[ArgSpec, ...]
    params: tuple[ParamSpec, ...]
    dtypes: tuple[str, ...]
    reference: Reference
    make_inputs: InputMaker
    cases: CaseBuilder
    sglang_target: str
    tolerances: Mapping[str, Tolerance] = field(default_factory=lambda: DEFAULT_TOLERANCES)
    arg_tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    canonicalize: Canonicalizer | None = None
    deterministic: bool = True
    bytes_moved: Callable[[ShapeCase, torch.dtype], int] | None = None
    flops: Callable[[ShapeCase], int] | None = None
    # Collective slots run on every rank of a process group at once. The kernel is called with
    # the slot's keyword args plus `group=` (a torch.distributed ProcessGroup); verify spawns
    # one sandboxed rank per member and checks every rank against `rank_reference`. `replicated`
    # names written args that must come out bit-identical on every rank (TP keeps them in sync).
    # `make_inputs` / `reference` stay the world-of-one view so single-rank tools keep working.
    collective: bool = False
    world_sizes: tuple[int, ...] = ()
    make_rank_inputs: RankInputMaker | None = None
    rank_reference: RankReference | None = None
    replicated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*", self.id):
            raise SlotError(f"slot id {self.id!r} must look like 'family.name'")
        names = [a.name for a in self.args] + [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise SlotError(f"{self.id}: duplicate argument/param names {names}")
        if not any(a.written for a in self.args):
            raise SlotError(f"{self.id}: a slot must write at least one out/inout argument")
        for d in self.dtypes:
            check_dtype_name(d)
            if d not in self.tolerances:
                raise SlotError(f"{self.id}: no tolerance for dtype {d}")
        self._check_collective(names)
        object.__setattr__(self, "tolerances", MappingProxyType(dict(self.tolerances)))
        object.__setattr__(self, "arg_tolerances", MappingProxyType(dict(self.arg_tolerances)))

    def _check_collective(self, names: list[str]) -> None:
        rank_fns = (self.make_rank_inputs, self.rank_reference)
        if not self.collective:
            if self.world_sizes or self.replicated or any(f is not None for f in rank_fns):
                raise SlotError(f"{self.id}: world_sizes/replicated/rank functions need collective=True")
            return
        if not self.world_sizes or any(w < 2 for w in self.world_sizes):
            raise SlotError(f"{self.id}: a collective slot needs world_sizes of at least 2 ranks")
        if any(f is None for f in rank_fns):
            raise SlotError(f"{self.id}: a collective slot needs make_rank_inputs and rank_reference")
        if GROUP_ARG in names:
            raise SlotError(f"{self.id}: {GROUP_ARG!r} is reserved for the process group of a collective slot")
        written = {a.name for a in self.args if a.written}
        if not set(self.replicated) <= written:
            raise SlotError(f"{self.id}: replicated {set(self.replicated) - written} are not written args")

    # -- views -------------------------------------------------------------------------
    @property
    def key(self) -> str:
        return f"{self.id}@{self.version}"

    def arg(self, name: str) -> ArgSpec:
        for a in self.args:
            if a.name == name:
                return a
        raise SlotError(f"{self.id}: no argument {name!r}")

    def by_role(self, *roles: str) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.role in roles)

    @property
    def graph_dynamic(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.graph_dynamic)

    def tolerance(self, arg: str, act_dtype: str) -> Tolerance:
        return self.arg_tolerances.get(arg) or self.tolerances[act_dtype]

    def signature(self) -> str:
        parts = []
        for a in self.args:
            dt = "act" if a.dtype == "act" else SHORT_DTYPE[a.dtype]
            lay = "" if a.layout == "contiguous" else " rows"
            dyn = " dyn" if a.graph_dynamic else ""
            parts.append(f"{a.name}: {a.role} {dt}[{','.join(a.shape)}]{lay}{dyn}")
        params = ", ".join(
            [f"{p.name}: {p.kind}" for p in self.params] + ([f"{GROUP_ARG}: ProcessGroup"] if self.collective else [])
        )
        return f"{self.key}({', '.join(parts)}{'; ' + params if params else ''})"

    # -- binding live tensors ------------------------------------------------------------
    def bind_dims(self, tensors: Tensors) -> dict[str, int]:
        """Unify symbolic shapes with live tensors; raise SlotError naming the arg on mismatch."""
        dims: dict[str, int] = {}
        for a in self.args:
            t = tensors.get(a.name)
            if t is None:
                raise SlotError(f"{self.id}: missing argument {a.name!r}")
            if t.dim() != len(a.shape):
                raise SlotError(f"{self.id}: {a.name} has rank {t.dim()}, expected {len(a.shape)} {a.shape}")
            for axis, (expr, extent) in enumerate(zip(a.dims, t.shape)):
                value = expr.solve(int(extent))
                if value is None:
                    raise SlotError(f"{self.id}: {a.name} axis {axis} = {extent} cannot be {expr}")
                prev = dims.setdefault(expr.name, value)
                if prev != value:
                    raise SlotError(f"{self.id}: {a.name} axis {axis} gives {expr.name}={value} but another arg gave {prev}")
        return dims

    def check_tensors(self, tensors: Tensors, act: torch.dtype) -> dict[str, int]:
        """Full ABI check of an argument set: dtype, rank/extents, layout. Returns bound dims."""
        dims = self.bind_dims(tensors)
        for a in self.args:
            t = tensors[a.name]
            want = a.torch_dtype(act)
            if t.dtype != want:
                raise SlotError(f"{self.id}: {a.name} dtype {t.dtype} != {want}")
            if a.layout == "contiguous" and not t.is_contiguous():
                raise SlotError(f"{self.id}: {a.name} must be contiguous")
            if a.layout == "rows" and t.dim() and t.stride(-1) != 1:
                raise SlotError(f"{self.id}: {a.name} must have a contiguous last dim")
        return dims

    def allocate(
        self, role: str, dims: Mapping[str, int], act: torch.dtype, device: str | torch.device
    ) -> dict[str, torch.Tensor]:
        """Fresh contiguous tensors for every argument with `role` (out / scratch)."""
        import torch

        return {
            a.name: torch.empty(a.concrete_shape(dims), dtype=a.torch_dtype(act), device=device)
            for a in self.args
            if a.role == role
        }

    def default_bytes(self, case: ShapeCase, act: torch.dtype) -> int:
        """Fewest bytes through memory: inputs read once, outputs written once, inout both."""
        if self.bytes_moved is not None:
            return self.bytes_moved(case, act)
        import torch

        total = 0
        for a in self.args:
            if a.role == "scratch":
                continue
            n = 1
            for s in a.concrete_shape(case.dims):
                n *= s
            size = n * torch.empty((), dtype=a.torch_dtype(act)).element_size()
            total += size * (2 if a.role == "inout" else 1)
        return total


def case(label: str, profile: str, dims: Mapping[str, int], **params: Any) -> ShapeCase:
    """Short constructor used by slot definitions."""
    return ShapeCase(label=label, profile=profile, dims=dims, params=params)
