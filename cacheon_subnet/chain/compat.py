"""Does the installed bittensor SDK still have every call and field BittensorChain uses?

SURFACE is the one list of SDK names BittensorChain touches, with how we pass each argument.
bittensor_backend.py reaches the SDK only through `sdk`, `sdk_call`, `invoke` and `field`, which
refuse a key not in SURFACE or arguments SURFACE does not declare, so the list and the code
cannot drift. `check_sdk` compares SURFACE with the installed SDK (inspect.signature) and
names each difference; the lead wires it to `cacheon chain-compat`.

Exit codes: 0 intact; 1 a call/field missing or changed; 2 SDK absent or not the pinned version.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.metadata
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

PIN = "11.3.0"
DIST = "bittensor"


@dataclass(frozen=True)
class Use:
    """One SDK name we rely on. owner: dotted path from the package ("" = the package)."""

    key: str
    owner: str
    attr: str
    kind: str  # "call" | "read" (a registry read: fetch(view, ...)) | "attr"
    pos: tuple[str, ...] = ()  # names of the arguments we pass positionally, in order
    kw: tuple[str, ...] = ()  # names we may pass by keyword
    forward: str = ""  # where **kwargs of this call land (checked for our kw names)


def _u(
    key: str,
    owner: str,
    attr: str,
    kind: str = "attr",
    pos: tuple[str, ...] = (),
    kw: tuple[str, ...] = (),
    forward: str = "",
) -> Use:
    return Use(key, owner, attr, kind, pos, kw, forward)


SURFACE: tuple[Use, ...] = (
    _u("Subtensor", "", "Subtensor", "call", kw=("network",)),
    _u("Wallet", "", "Wallet", "call", kw=("name", "hotkey", "path")),
    _u("Wallet.hotkey", "Wallet", "hotkey"),
    _u("Keypair.ss58_address", "sp_core.Keypair", "ss58_address"),
    _u("client.block", "SyncClient", "block"),
    _u("client.subnets", "SyncClient", "subnets"),
    _u("client.weights", "SyncClient", "weights"),
    _u("client.block_time", "SyncClient", "block_time", "call"),
    _u("client.query", "SyncClient", "query", "call", pos=("item", "params")),
    _u("client.compose", "SyncClient", "compose", "call", pos=("call",)),
    _u("client.execute", "SyncClient", "execute", "call", pos=("intent", "wallet")),
    _u(
        "client.submit_call",
        "SyncClient",
        "submit_call",
        "call",
        pos=("call", "wallet"),
        kw=("signer",),
        forward="executor.Executor",
    ),
    _u("subnets.metagraph", "namespaces.Subnets", "metagraph", "call", pos=("netuid",), kw=("commitments",)),
    _u("subnets.commitments", "namespaces.Subnets", "commitments", "call", pos=("netuid",)),
    _u("weights.weights", "reads.base.REGISTRY", "weights", "read", pos=("netuid",)),
    _u("SetWeights", "", "SetWeights", "call", kw=("netuid", "uids", "weights", "version_key")),
    _u("ServeAxon", "", "ServeAxon", "call", kw=("netuid", "ip", "port", "protocol", "version")),
    _u("timelock.encrypt", "timelock", "encrypt", "call", pos=("data",), kw=("reveal_in",)),
    _u("Timelocked.encrypted", "Timelocked", "encrypted"),
    _u("Timelocked.reveal_round", "Timelocked", "reveal_round"),
    _u("calls.set_commitment", "calls.Commitments", "set_commitment", "call", kw=("netuid", "info")),
    _u("storage.WeightsVersionKey", "storage.SubtensorModule", "WeightsVersionKey"),
    _u("storage.WeightsSetRateLimit", "storage.SubtensorModule", "WeightsSetRateLimit"),
    _u("storage.LastUpdate", "storage.SubtensorModule", "LastUpdate"),
    _u("storage.Uids", "storage.SubtensorModule", "Uids"),
    _u("storage.SubnetOwnerHotkey", "storage.SubtensorModule", "SubnetOwnerHotkey"),
    _u("Metagraph.block", "Metagraph", "block"),
    _u("Metagraph.neurons", "Metagraph", "neurons"),
    _u("MetagraphNeuron.uid", "MetagraphNeuron", "uid"),
    _u("MetagraphNeuron.hotkey", "MetagraphNeuron", "hotkey"),
    _u("MetagraphNeuron.coldkey", "MetagraphNeuron", "coldkey"),
    _u("MetagraphNeuron.validator_permit", "MetagraphNeuron", "validator_permit"),
    _u("MetagraphNeuron.total_stake", "MetagraphNeuron", "total_stake"),
    _u("MetagraphNeuron.axon", "MetagraphNeuron", "axon"),
    _u("Balance.tao", "Balance", "tao"),
    # internal decoders wrapped per entry (chain/sdk_hooks.py: one bad commitment must not fail the subnet's read)
    _u("metagraph._revealed_entry", "metagraph", "_revealed_entry", "call", pos=("entry",)),
    _u("metagraph._decode_fields", "metagraph", "_decode_fields", "call", pos=("fields",)),
    _u("NeuronCommitment.uid", "NeuronCommitment", "uid"),
    _u("NeuronCommitment.block", "NeuronCommitment", "block"),
    _u("NeuronCommitment.revealed", "NeuronCommitment", "revealed"),
    _u("NeuronCommitment.fields", "NeuronCommitment", "fields"),
    _u("ExtrinsicResult.raise_for_failure", "ExtrinsicResult", "raise_for_failure", "call"),
    _u("ExtrinsicResult.extrinsic_id", "ExtrinsicResult", "extrinsic_id"),
    _u("BittensorError", "", "BittensorError"),
    _u("ChainError", "", "ChainError"),
    _u("ChainError.name", "ChainError", "name"),
    _u("ChainError.code", "ChainError", "code"),
    _u("RpcConnectionError", "", "RpcConnectionError"),
    _u("ConnectionNotReady", "", "ConnectionNotReady"),
    _u("ErrorCode.RATE_LIMITED", "ErrorCode", "RATE_LIMITED"),
    _u("ErrorCode.NOT_REGISTERED", "ErrorCode", "NOT_REGISTERED"),
)
BY_KEY: Mapping[str, Use] = {u.key: u for u in SURFACE}


# -- the only doors from bittensor_backend.py into the SDK -----------------------------------


def _use(key: str, kinds: tuple[str, ...]) -> Use:
    use = BY_KEY.get(key)
    if use is None or use.kind not in kinds:
        raise RuntimeError(f"compat.SURFACE has no {'/'.join(kinds)} entry {key!r}; add it there")
    return use


def sdk(root: Any, key: str) -> Any:
    """A package-level SDK object (class, function, storage item, enum member)."""
    use = _use(key, ("attr", "call", "read"))
    return _get(resolve(root, use.owner), use.attr)


def invoke(target: Any, key: str, *args: Any, **kwargs: Any) -> Any:
    """Call `target.<attr>` exactly as SURFACE[key] declares (else RuntimeError: fix SURFACE)."""
    use = _use(key, ("call", "read"))
    if len(args) != len(use.pos) or not set(kwargs) <= set(use.kw):
        raise RuntimeError(
            f"{key}: called with {len(args)} positional and {sorted(kwargs)} "
            f"keywords; SURFACE declares pos={use.pos} kw={use.kw}"
        )
    return getattr(target, use.attr)(*args, **kwargs)


def sdk_call(root: Any, key: str, *args: Any, **kwargs: Any) -> Any:
    """Call a package-level SDK function/class (SURFACE owner resolved from `root`)."""
    return invoke(resolve(root, _use(key, ("call",)).owner), key, *args, **kwargs)


def field(obj: Any, key: str) -> Any:
    return getattr(obj, _use(key, ("attr",)).attr)


def resolve(root: Any, dotted: str) -> Any:
    obj = root
    for part in filter(None, dotted.split(".")):
        obj = _get(obj, part)
    return obj


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj[name]
    try:
        return getattr(obj, name)
    except AttributeError:
        if isinstance(obj, ModuleType):  # a submodule nobody imported yet
            return importlib.import_module(f"{obj.__name__}.{name}")
        raise


# -- the check --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    status: str  # "OK" | "FAIL"
    detail: str


@dataclass(frozen=True)
class CompatReport:
    version: str | None
    pin: str
    rows: tuple[Row, ...]
    exit_code: int

    @property
    def failures(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.status != "OK")


def _params(fn: Any, skip_first: bool) -> list[inspect.Parameter]:
    params = list(inspect.signature(fn).parameters.values())
    return params[1:] if skip_first and params else params


def _check_args(use: Use, params: list[inspect.Parameter], forward: list | None) -> list[str]:
    problems: list[str] = []
    by_name = {p.name: p for p in params}
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    for i, name in enumerate(use.pos):
        if i >= len(positional):
            if not var_pos:
                problems.append(f"takes {len(positional)} positional args; we pass {name!r} as #{i + 1}")
        elif positional[i].name != name:
            problems.append(f"positional #{i + 1} is {positional[i].name!r}; we pass {name!r} there (renamed or reordered)")
    for name in use.kw:
        p = by_name.get(name)
        if p is None and var_kw and forward is not None:
            p = {q.name: q for q in forward}.get(name)
            where = f" (nor in forwarded {use.forward}.{use.attr})"
        else:
            where = ""
        if p is None or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            have = ", ".join(q.name for q in params if q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD))
            problems.append(f"no keyword parameter {name!r}{where}; has ({have})")
        elif p.kind is p.POSITIONAL_ONLY:
            problems.append(f"parameter {name!r} became positional-only")
    supplied = set(use.pos) | set(use.kw)
    for p in positional[len(use.pos) :] + [p for p in params if p.kind is p.KEYWORD_ONLY]:
        if p.default is p.empty and p.name not in supplied:
            problems.append(f"new required parameter {p.name!r}")
    return problems


def _is_method(owner: Any, attr: str) -> bool:
    raw = inspect.getattr_static(owner, attr, None)
    return inspect.isclass(owner) and not isinstance(raw, (staticmethod, classmethod))


def _has_attr(owner: Any, attr: str) -> bool:
    if isinstance(owner, type) and issubclass(owner, enum.Enum):
        return attr in owner.__members__
    if dataclasses.is_dataclass(owner) and attr in {f.name for f in dataclasses.fields(owner)}:
        return True
    if hasattr(owner, attr) or attr in getattr(owner, "__annotations__", {}):
        return True  # annotations: attributes a class sets per instance (SyncClient.subnets)
    if isinstance(owner, type) and issubclass(owner, BaseException):
        try:  # exceptions set their fields in __init__
            return hasattr(owner("compat probe"), attr)
        except Exception:
            return False
    return False


def _check_one(root: Any, use: Use) -> Row:
    where = f"bittensor.{use.owner}" if use.owner else "bittensor"
    try:
        owner = resolve(root, use.owner)
    except (AttributeError, KeyError, ImportError) as exc:
        return Row(use.key, "FAIL", f"{where} is missing ({exc})")
    if use.kind == "attr":
        ok = _has_attr(owner, use.attr)
        return Row(
            use.key, "OK" if ok else "FAIL", f"{where}.{use.attr}" if ok else f"{where} has no field/attribute {use.attr!r}"
        )
    try:
        target = _get(owner, use.attr)
    except (AttributeError, KeyError, ImportError):
        return Row(use.key, "FAIL", f"{where} has no {use.attr!r}")
    if use.kind == "read":
        target, skip = getattr(target, "fetch", None), True  # fetch(view, ...)
    else:
        skip = _is_method(owner, use.attr) and inspect.isfunction(inspect.getattr_static(owner, use.attr, None))
    if not callable(target):
        return Row(use.key, "FAIL", f"{where}.{use.attr} is not callable")
    try:
        params = _params(target, skip)
        forward = None
        if use.forward:
            fwd_owner = resolve(root, use.forward)
            forward = _params(_get(fwd_owner, use.attr), _is_method(fwd_owner, use.attr))
    except (ValueError, TypeError, AttributeError, KeyError, ImportError) as exc:
        return Row(use.key, "FAIL", f"cannot read the signature of {where}.{use.attr}: {exc}")
    problems = _check_args(use, params, forward)
    if problems:
        return Row(use.key, "FAIL", f"{where}.{use.attr}: " + "; ".join(problems))
    shown = [*use.pos, *(f"{k}=" for k in use.kw)]
    return Row(use.key, "OK", f"{where}.{use.attr}({', '.join(shown)})")


def check_sdk(module: Any = None, version: str | None = None) -> CompatReport:
    """Check SURFACE against `module` (default: import bittensor) and the pinned version."""
    if version is None:
        try:
            version = importlib.metadata.version(DIST)
        except importlib.metadata.PackageNotFoundError:
            version = None
    if module is None:
        try:
            module = importlib.import_module("bittensor")
        except Exception as exc:  # absent, or broken dependencies
            missing = Row("bittensor", "FAIL", f"cannot import bittensor: {exc}; install with: pip install {DIST}=={PIN}")
            return CompatReport(version, PIN, (missing,), 2)
    pin_ok = version == PIN
    pin_row = Row(
        f"{DIST} version",
        "OK" if pin_ok else "FAIL",
        f"installed {version}, pin {PIN}" if version else f"{DIST} is not installed (pip install {DIST}=={PIN})",
    )
    rows = (pin_row, *(_check_one(module, use) for use in SURFACE))
    code = 2 if not pin_ok else (1 if any(r.status != "OK" for r in rows) else 0)
    return CompatReport(version, PIN, rows, code)


def render(report: CompatReport) -> str:
    width = max(len(r.name) for r in report.rows)
    lines = [
        f"bittensor SDK compatibility (installed {report.version or 'none'}, pin "
        f"{report.pin}): {len(report.failures)} problem(s), exit {report.exit_code}"
    ]
    lines += [f"  {r.status:<4}  {r.name:<{width}}  {r.detail}" for r in report.rows]
    return "\n".join(lines)
