"""Pure checks on what the worker sent back. The host alone decides; the worker only runs."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from cacheon_subnet.slots.compare import compare, nonfinite_count
from cacheon_subnet.slots.spec import SlotSpec, dtype_of
from cacheon_subnet.tensor_views import same_bits, tensor_digest
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify.report import Failure

POISON_FLOAT = (float("nan"), -31337.0)
POISON_INT = (-0x5A5A5A5A, 0x3C3C3C3C)
BIG_INPUT = 64 << 20  # read-only inputs above this come back from the worker as a digest, not as bytes


def poison_value(dtype: torch.dtype, which: int) -> torch.Tensor:
    """The poison exactly as the worker's fill_ stores it in `dtype` (bf16 rounds -31337)."""
    if dtype.is_floating_point:
        return torch.tensor(POISON_FLOAT[which], dtype=dtype)
    if dtype == torch.bool:
        return torch.tensor(which == 0, dtype=dtype)
    return torch.tensor(POISON_INT[which], dtype=torch.int64).to(dtype)


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equality that treats NaN == NaN (for inputs that legitimately hold NaN nowhere)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool((a == b).all())


# Reasons a worker may report for its own failure; anything else is a protocol violation.
WORKER_REASONS = frozenset({"exception", "host_sync", "graph_capture", "graph_replay", "import_error", "entry_missing"})


@dataclasses.dataclass(frozen=True)
class Reply:
    """One call or graph trial's reply as the judge reads it: the worker's `Result` as its decoder
    (verify/protocol.py) read it, or None with `refused`, the host's own protocol finding (the
    reply did not decode, answers another request, returns tensors nothing asked for, digests
    something other than a read-only input). `mutated`: large read-only inputs whose digest came
    back changed (merge_digests). Why typed: a check reads fields the decoder vouched for, never
    a key a hostile worker may have left out."""

    result: P.Result | None
    refused: Failure | None = None
    mutated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.result is None) == (self.refused is None):
            raise ValueError("a Reply holds either the worker's result or the host's refusal of it")

    @property
    def ok(self) -> bool:
        """The worker says the call ran (a claim: only the tensors can pass a trial)."""
        return self.result is not None and self.result.ok


def decoded(raw: object) -> Reply:
    """The worker's reply `raw` (a wire header) through the pipe's strict decoder: a `Result`, or
    refused as protocol naming the message and field."""
    try:
        return Reply(P.read_reply(raw, P.Result))
    except P.ProtocolError as e:
        return Reply(None, Failure("protocol", str(e)[:900]))


def refuse(f: Failure) -> Reply:
    """The host's refusal of a reply (check_reply reports it as protocol, whatever it said)."""
    return Reply(None, f)


def check_nonce(result: P.Result, nonce: str) -> Failure | None:
    """A reply answers exactly the request that carried `nonce` (random per call): one replayed,
    queued ahead of its request or pre-computed is refused before any tensor is looked at."""
    if result.nonce != nonce:
        return Failure("protocol", f"reply carries nonce {result.nonce[:40]!r}, not this call's: it answers another request")
    return None


def _malformed(ok: bool, reason: str, detail: str) -> Failure:
    return Failure("protocol", f"malformed reply (ok={str(ok)[:20]!r}, reason={reason[:40]!r}): {detail[-400:]}")


def check_reply(reply: Reply) -> Failure | None:
    """Failures the worker reported about itself (exceptions, syncs, aliasing, return values).
    These can only fail a trial: a PASS is decided by check_outputs/check_pair on the tensors the
    host reads back, never by a flag. A refused reply fails closed (protocol); the decoder has
    already refused every reply whose fields are not of their types."""
    r = reply.result
    if r is None:
        assert reply.refused is not None  # Reply holds one or the other
        return _malformed(False, reply.refused.reason, reply.refused.detail[-900:])
    if not r.ok:
        reason, detail = str(r.reason or "exception"), (r.error or "")[-900:]
        return Failure(reason, detail) if reason in WORKER_REASONS else _malformed(False, reason, detail)
    if reply.mutated:
        return Failure(
            "input_mutated", f"{list(reply.mutated)} changed (digest differs) but the slot declares them read-only"
        )
    if r.returned:
        return Failure("return_value", f"kernel returned {r.returned}; write into out/inout args and return None")
    if r.host_sync:
        return Failure("host_sync", "; ".join(r.host_sync[:3]))
    if r.aliases:
        return Failure("output_aliasing", "; ".join(r.aliases[:3]))
    return None


def check_returned(
    msg: Mapping[str, Any], sent: Mapping[str, torch.Tensor], got: Mapping[str, torch.Tensor]
) -> Failure | None:
    """Every tensor of a reply has the name, shape and dtype the host sent or allocated (a graph
    reply's `r<i>.<arg>` those of `<arg>`), checked before anything reads it: the wire keeps views,
    so a stride-0 tensor of any logical size costs the worker a few bytes and would cost the host
    full-size temporaries in isnan / == / isfinite (`tests/adversarial/test_trials_shapes.py`)."""
    want = {k: (tuple(v.shape), v.dtype) for k, v in sent.items()}
    for name, a in (msg.get("alloc") or {}).items():
        want[name] = (tuple(a["shape"]), dtype_of(a["dtype"]))
    for name, t in got.items():
        base = name.split(".", 1)[1] if msg.get("type") == "graph" and name[:1] == "r" and "." in name else name
        w = want.get(name) or want.get(base)
        if w is None:
            return Failure("protocol", f"reply tensor {name[:40]!r} answers nothing the host sent or allocated")
        if (tuple(t.shape), t.dtype) != w:
            return Failure(
                "protocol", f"{name[:40]} came back as {t.dtype}{tuple(t.shape)} (shape and dtype), expected {w[1]}{w[0]}"
            )
    return None


def check_graph_keys(spec: SlotSpec, out: Mapping[str, torch.Tensor], replays: int) -> Failure | None:
    """A graph reply holds exactly r<i>.<written arg> for every replay: nothing missing, nothing else."""
    want = {f"r{i}.{a.name}" for i in range(replays) for a in spec.args if a.written}
    if set(out) != want:
        missing, extra = sorted(want - set(out))[:4], sorted(set(out) - want)[:4]
        return Failure("protocol", f"graph reply tensors: missing {missing}, unexpected {extra}")
    return None


def check_graph_inputs(
    spec: SlotSpec, reply: Reply, expected: Mapping[str, torch.Tensor], known: Mapping[str, str] | None = None
) -> Failure | None:
    """After the last replay every read-only input must hold what the host put there (the
    capture's values, or the last replay's for graph-dynamic ones): writes recorded only while
    capturing never show in an eager trial, so the graph trial checks them itself. `known`: the
    host's digests of `expected`, made when it drew them."""
    final = reply.result.final_digests if reply.result is not None else None
    names = {a.name for a in spec.by_role("in")}
    if final is None or set(final) != names:
        return Failure("protocol", f"graph reply: final_digests must name exactly the read-only inputs {sorted(names)}")
    for name in sorted(names):
        mine = (known or {}).get(name) or tensor_digest(expected[name])
        if final[name] != mine:
            return Failure("input_mutated", f"{name} changed under CUDA-graph replay but the slot declares it read-only")
    return None


def check_shapes(spec: SlotSpec, sent: Mapping[str, torch.Tensor], got: Mapping[str, torch.Tensor]) -> Failure | None:
    """The worker is untrusted: every argument must come back, with the shape/dtype it went out with."""
    for a in spec.args:
        if a.role == "scratch":
            continue
        t = got.get(a.name)
        if t is None:
            return Failure("protocol", f"worker did not return argument {a.name!r}")
        ref = sent.get(a.name)
        if ref is not None and (t.shape != ref.shape or t.dtype != ref.dtype):
            return Failure(
                "protocol", f"{a.name} came back as {t.dtype}{tuple(t.shape)}, sent {ref.dtype}{tuple(ref.shape)}"
            )
    return None


def check_inputs_untouched(
    spec: SlotSpec, sent: Mapping[str, torch.Tensor], got: Mapping[str, torch.Tensor]
) -> Failure | None:
    f = check_shapes(spec, sent, got)
    if f:
        return f
    for a in spec.by_role("in"):
        if not same_bits(got[a.name], sent[a.name]):  # a sign-of-zero or NaN-payload write counts too
            diff = int((got[a.name] != sent[a.name]).sum()) if got[a.name].shape == sent[a.name].shape else -1
            return Failure("input_mutated", f"{a.name} changed ({diff} elements) but the slot declares it read-only")
    return None


def unwritten(t1: torch.Tensor, t2: torch.Tensor) -> int:
    """Elements that still hold poison 0 in run 1 and poison 1 in run 2: never written."""
    p1, p2 = poison_value(t1.dtype, 0), poison_value(t2.dtype, 1)
    first = torch.isnan(t1) if t1.is_floating_point() else t1 == p1
    return int((first & (t2 == p2)).sum())


def still_poisoned(spec: SlotSpec, got: Mapping[str, torch.Tensor]) -> str | None:
    """Out args that still hold poison 1 (-31337 / 0x3C3C3C3C) after a call handed them poison 1:
    names a failed call's cause (never written) instead of the mismatch it shows as."""
    for a in spec.by_role("out"):
        t = got.get(a.name)
        if t is not None and t.dtype != torch.bool:
            n = int((t == poison_value(t.dtype, 1)).sum())
            if n:
                return f"{a.name}: {n} of {t.numel()} elements never written"
    return None


def check_pair(
    spec: SlotSpec,
    act: str,
    sent: Mapping[str, torch.Tensor],
    r1: Mapping[str, torch.Tensor],
    r2: Mapping[str, torch.Tensor],
    ref: Mapping[str, torch.Tensor],
) -> Failure | None:
    """Two runs on identical inputs with different poisons: writes, NaN, determinism, accuracy."""
    for got in (r1, r2):
        f = check_inputs_untouched(spec, sent, got)
        if f:
            return f
    for a in spec.by_role("out"):
        n = unwritten(r1[a.name], r2[a.name])
        if n:
            return Failure("partial_write", f"{a.name}: {n} of {r1[a.name].numel()} elements never written")
    f = check_outputs(spec, act, r2, ref)
    if f:
        return f
    if spec.deterministic:
        for a in spec.args:
            if a.written and not bit_equal(r1[a.name], r2[a.name]):
                n = int((r1[a.name] != r2[a.name]).sum())
                return Failure("nondeterministic", f"{a.name}: {n} elements differ between two runs on identical inputs")
    return None


def check_outputs(
    spec: SlotSpec, act: str, got: Mapping[str, torch.Tensor], ref: Mapping[str, torch.Tensor]
) -> Failure | None:
    """NaN/Inf never passes; then the slot's tolerance against the reference."""
    missing = [a.name for a in spec.args if a.written and a.name not in got]
    if missing:
        return Failure("protocol", f"worker did not return {missing}")
    for a in spec.args:
        want = a.torch_dtype(dtype_of(act))
        if a.written and got[a.name].dtype != want:
            # a wider dtype than the engine's buffer would be judged on precision it never gets
            return Failure("protocol", f"{a.name} came back as {got[a.name].dtype}, the slot writes {want}")
    for a in spec.args:
        if a.written:
            n = nonfinite_count(got[a.name])
            if n:
                return Failure("nan_inf", f"{a.name}: {n} of {got[a.name].numel()} elements are NaN/Inf")
    outs = {a.name: got[a.name] for a in spec.args if a.written}
    refs = dict(ref)
    if spec.canonicalize is not None:
        outs, refs = spec.canonicalize(outs), spec.canonicalize(refs)
    for name, expected in refs.items():
        c = compare(outs[name], expected, spec.tolerance(name, act))
        if not c.ok:
            where = f" first bad index {c.first_bad}" if c.first_bad else ""
            return Failure("mismatch", f"{name}: {c.detail}{where}")
    return None


def check_digests(spec: SlotSpec, result: P.Result) -> Failure | None:
    """Digests stand in for large read-only inputs only: one for an output or an unknown name
    would let the host's own copy of an input stand in for a result."""
    if result.digests is None:
        return None
    names = {a.name for a in spec.by_role("in")}
    if not set(result.digests) <= names:
        return Failure("protocol", "reply digests name something other than a read-only input")
    return None


DigestCache = dict[int, tuple[Any, int, str]]  # id(tensor) -> (weakref to it, its version, digest)


def sent_digest(t: torch.Tensor, cache: DigestCache | None = None) -> str:
    """The host's digest of a tensor it sent, once per tensor object and version: an
    identical-input pair sends the same 1.4 GB K/V pool twice and needs its digest once. The
    entry holds only a weak reference, checked to still be this very tensor (a freed tensor's id
    may be reused), and the version counter moves on any in-place write."""
    if cache is None:
        return tensor_digest(t)
    hit = cache.get(id(t))
    if hit is not None and hit[0]() is t and hit[1] == t._version:
        return hit[2]
    digest = tensor_digest(t)
    if len(cache) > 256:  # drop the entries of tensors already freed
        for k in [k for k, v in cache.items() if v[0]() is None]:
            del cache[k]
    cache[id(t)] = (weakref.ref(t), t._version, digest)
    return digest


def merge_digests(
    reply: Reply,
    tensors: dict[str, torch.Tensor],
    sent: Mapping[str, torch.Tensor],
    cache: DigestCache | None = None,
    known: Mapping[str, str] | None = None,
) -> Reply:
    """A large read-only input came back as a digest: unchanged -> reuse what was sent; changed ->
    the reply's `mutated` (check_reply turns that into input_mutated). `known`: the host's digests
    of `sent`, made when it drew them (verify/draws.py)."""
    mutated = list(reply.mutated)
    digests = reply.result.digests if reply.result is not None else None
    for name, digest in (digests or {}).items():
        mine = known.get(name) if known is not None and name in sent else None
        if name in sent and name not in tensors and (mine or sent_digest(sent[name], cache)) == digest:
            tensors[name] = sent[name]
        else:
            mutated.append(name)
    return dataclasses.replace(reply, mutated=tuple(mutated)) if mutated else reply


def check_replicated(spec: SlotSpec, per_rank: Sequence[Mapping[str, torch.Tensor]]) -> Failure | None:
    """Collectives: outputs the slot declares replicated must be bit-identical on every rank (TP
    ranks that drift apart route, sample and reduce differently from then on)."""
    for name in spec.replicated:
        base = per_rank[0][name]
        for r in range(1, len(per_rank)):
            other = per_rank[r][name]
            if not bit_equal(other, base):
                n = int((other != base).sum()) if other.shape == base.shape else other.numel()
                return Failure(
                    "rank_divergence",
                    f"{name}: rank {r} differs from rank 0 in {n} of {base.numel()} "
                    "elements; every rank must hold the same result",
                    rank=r,
                )
    return None
