"""What a validator checks and decides before its first pass (issue 16: safe defaults, start-up checks).

* Safe defaults: on a non-local chain the arena must be a GPU config; CPU timing (host-timed
  slot calls, advisory) only with --allow-cpu-timing, and then every record's label says so.
  The state dir defaults outside any checkout, keyed by network/netuid/hotkey.
* Start-up checks, each failing with what to do: the hotkey is registered and holds a validator
  permit; the bittensor SDK surface (`cacheon chain-compat`) and, for a GPU arena, the SGLang
  seam canary (`cacheon compat`) are green; the subnet's weights_version_key does not retire
  this code. GPU/driver/torch/SGLang identity and the effective config are logged.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from cacheon_subnet import __spec_version__, __version__
from cacheon_subnet.env import HOME, SANDBOX
from cacheon_subnet.errors import CacheonError

CPU_OPT_IN_LABEL = "cpu-timing:opt-in"  # --allow-cpu-timing on a non-local chain: in every evidence row
LOCAL_NETWORKS = ("local",)


class StartupError(CacheonError):
    """A start-up check failed; the message says which and what to do."""


def cacheon_home() -> Path:
    """$CACHEON_HOME, else ~/.cacheon: outside any checkout (a re-clone or `git clean` keeps it)."""
    return Path(HOME.get())


def deny_to_children(state_dir: Path, wallet_path: str | None) -> None:
    """The state dir and the wallet dir, wherever the operator put them (inside the checkout or a
    venv dir, which every sandboxed child sees read-only), are never in any child's view."""
    from cacheon_subnet.sandbox import fsview

    fsview.deny(state_dir, os.path.expanduser(wallet_path) if wallet_path else None)


def is_local(chain: str, network: str) -> bool:
    """The embedded LocalChain, or a subtensor on this machine (`local`, ws://127.0.0.1:..., localhost)."""
    if chain == "local":
        return True
    return network in LOCAL_NETWORKS or bool(
        re.fullmatch(r"^wss?://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?/?$", network)
    )


def network_key(chain: str, network: str, local_chain: str | None) -> str:
    """A path-safe name for the chain a state dir belongs to."""
    if chain == "local":
        ident = hashlib.sha256(os.path.abspath(local_chain or "").encode()).hexdigest()[:10]
        return f"localchain-{ident}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", network).strip("_") or "unknown"


def default_state_dir(network: str, netuid: int, hotkey: str) -> Path:
    """$CACHEON_HOME/validator/<network>/<netuid>/<hotkey>: one validator identity, one DB."""
    safe_hotkey = re.sub(r"[^A-Za-z0-9._-]+", "_", hotkey).strip("_") or "unknown"
    return cacheon_home() / "validator" / network / str(netuid) / safe_hotkey


def existing_state_dirs() -> list[Path]:
    """Validator state dirs under the default root (what `cacheon status` can pick from)."""
    root = cacheon_home() / "validator"
    return sorted(p.parent for p in root.glob("*/*/*/validator.sqlite"))


def check_sandbox(local: bool, log: Any = None) -> str:
    """Off a local chain the OS wall must hold before anything is fetched: CACHEON_SANDBOX=weak or
    a host where the wall cannot start (not root, no bwrap, no user namespaces, an unreadable
    venv) is refused here, not found at the first bundle (weak mode there ran miner code as the
    validator's own uid with its wallet and state DB in reach). Returns "wall"; on a local chain
    (development, tests) nothing is enforced here: why the wall is weak, else "unchecked"."""
    from cacheon_subnet.errors import SandboxError
    from cacheon_subnet.sandbox import SandboxPolicy, launcher, weak_requested

    weak = weak_requested(SandboxPolicy())
    if local:
        if weak and log is not None:
            log.warning("validator.sandbox_weak", reason=weak, uid=os.getuid())
        return weak or "unchecked"
    if weak:
        raise StartupError(
            f"the sandbox is in WEAK MODE ({weak}): contribution code would run as uid {os.getuid()} "
            "with no dedicated user, filesystem view or seccomp filter (the wallet and the state DB in "
            f"reach). Weak mode is for local chains only: unset {SANDBOX.name} and check `cacheon "
            "doctor --gpu`"
        )
    try:
        launcher.preflight()
    except SandboxError as exc:
        raise StartupError(
            f"the sandbox wall does not hold on this host: {exc}. `cacheon doctor --gpu` shows every "
            "layer; a validator off a local chain never runs without it"
        ) from None
    return "wall"


def arena_spec(arena: str | None, local: bool, network: str) -> str:
    """--arena: required (a GPU config) on a non-local chain; "cpu" is the local default."""
    if arena:
        return arena
    if local:
        return "cpu"
    raise StartupError(
        f"--arena configs/arena/<name>.toml is required on network {network!r}: weights there must "
        "come from the GPU arena. (CPU timing is advisory: opt in with --arena cpu --allow-cpu-timing.)"
    )


def check_timing(qualifier: Any, local: bool, allow_cpu_timing: bool, network: str) -> Any:
    """A CPU qualifier on a non-local chain only with the opt-in, relabelled so every record says so."""
    label = getattr(qualifier, "label", "")
    if not str(label).startswith("cpu-timing"):
        if allow_cpu_timing:
            raise StartupError("--allow-cpu-timing was given but the arena is not CPU timing; drop the flag")
        return qualifier
    if local:
        return qualifier
    if not allow_cpu_timing:
        raise StartupError(
            f"--arena is CPU timing on network {network!r}: host-timed slot calls are advisory and can "
            "crown the wrong kernels (a faithful Triton kernel scored 0.001x there). Use a GPU arena "
            "config (configs/arena/dense.toml), or --allow-cpu-timing to publish CPU-timed weights "
            f"knowingly (every record is then labelled {CPU_OPT_IN_LABEL!r})."
        )
    return replace(qualifier, label=CPU_OPT_IN_LABEL)


def check_registration(backend: Any, netuid: int, hotkey: str) -> dict[str, Any]:
    """The hotkey is a neuron of netuid and holds a validator permit (else set_weights fails after
    a whole pass). Returns {uid, stake}."""
    mg = backend.metagraph(netuid)
    uid = mg.uid_of(hotkey)
    if uid is None:
        raise StartupError(
            f"hotkey {hotkey} is not registered on netuid {netuid} ({len(mg.neurons)} neurons): "
            f"register it first (btcli subnets register --netuid {netuid}) or check --wallet.hotkey"
        )
    n = mg.by_uid(uid)
    if not n.validator_permit:
        raise StartupError(
            f"hotkey {hotkey} (uid {uid} on netuid {netuid}, stake {n.stake:g}) has no validator "
            "permit: the chain refuses its weights. Add stake until it holds a permit, then restart"
        )
    return {"uid": uid, "stake": n.stake}


def check_version_key(backend: Any, netuid: int, spec: int = __spec_version__) -> int:
    required = int(backend.weights_version_key(netuid))
    if spec < required:
        raise StartupError(
            f"this code's spec version {spec} ({__version__}) is below the subnet's weights_version_key "
            f"{required}: the owner has retired it. Upgrade (docs/operators.md, Upgrades)"
        )
    return required


def check_compat(chain: str, gpu_arena: bool) -> dict[str, int]:
    """`cacheon chain-compat` for the bittensor chain; `cacheon compat` (runtime) for a GPU arena."""
    out: dict[str, int] = {}
    if chain == "bittensor":
        from cacheon_subnet.chain.compat import check_sdk, render

        rep = check_sdk()
        out["chain_compat"] = rep.exit_code
        if rep.exit_code != 0:
            raise StartupError(
                f"chain-compat failed (exit {rep.exit_code}): the installed bittensor SDK is not the "
                f"pinned one or lost a call we use; run `cacheon chain-compat`.\n{render(rep)[-1500:]}"
            )
    if gpu_arena:
        from seams.compat import render as render_seams
        from seams.compat import runtime_check

        srep = runtime_check()
        out["compat"] = srep.exit_code
        if srep.exit_code != 0:
            raise StartupError(
                f"compat failed (exit {srep.exit_code}): the installed SGLang is not the pinned one or "
                f"a seam moved; run `cacheon compat`.\n{render_seams(srep)[-1500:]}"
            )
    return out


def identity() -> dict[str, Any]:
    """What this validator runs on, for the log (and for operators comparing numbers)."""
    ident: dict[str, Any] = {"cacheon": __version__, "spec_version": __spec_version__, "python": sys.version.split()[0]}
    for dist in ("torch", "sglang", "bittensor", "triton"):
        try:
            ident[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            ident[dist] = None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            ident["gpus"] = [line.strip() for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError) as e:
            ident["gpus"] = f"nvidia-smi failed: {e}"
    else:
        ident["gpus"] = []
    try:
        import torch

        ident["torch_cuda"] = torch.version.cuda
        ident["cuda_available"] = bool(torch.cuda.is_available())
    except ImportError:
        pass
    return ident
