"""`cacheon miner status`: the miner's standing as validators see it.

Registration and uid from the metagraph; the latest commitment from the chain, parsed with
the same `commitment.parse` validators run (so a copied or malformed payload shows as invalid
here too); a still-sealed submission from the local record (the chain hides it until reveal);
whether each committed URL serves bytes with the committed content digest (fetched strictly,
as a validator would); and the weight every validator-permit hotkey currently gives this uid.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.chain import commitment
from cacheon_subnet.chain.backend import ChainBackend, ChainError
from cacheon_subnet.chain.endpoints import validator_endpoints
from cacheon_subnet.miner import verdicts as verdicts_mod
from cacheon_subnet.miner.serve import Probe, probe
from cacheon_subnet.miner.submit import SubmissionRecord, chain_label, chain_view
from cacheon_subnet.netpolicy import policy_for_backend


@dataclass(frozen=True)
class RevealedView:
    """The hotkey's revealed commitment. `error` is the parse rejection (validators skip it)."""

    commit_block: int
    reveal_block: int
    digest: str | None
    url: str | None
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class PendingView:
    """Our own sealed submission (from the local record): public at reveal_block."""

    digest: str
    url: str
    commit_block: int
    reveal_block: int
    blocks_left: int


@dataclass(frozen=True)
class ValidatorWeight:
    uid: int
    hotkey: str
    stake: float
    weight: float  # fraction of this validator's row given to the miner's uid
    has_row: bool  # False: the validator has set no weights at all
    error: str | None = None


@dataclass(frozen=True)
class MinerStatus:
    chain: str
    netuid: int
    block: int
    hotkey: str
    uid: int | None
    revealed: RevealedView | None
    pending: PendingView | None
    probes: tuple[Probe, ...]
    weights: tuple[ValidatorWeight, ...]
    verdicts: tuple[verdicts_mod.ValidatorVerdicts, ...] = ()  # each validator's verdicts, from its leaderboard

    @property
    def registered(self) -> bool:
        return self.uid is not None

    @property
    def state(self) -> str:
        """none | pending | revealed | invalid (a revealed payload validators reject)."""
        if self.pending is not None:
            return "pending"
        if self.revealed is None:
            return "none"
        return "revealed" if self.revealed.valid else "invalid"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(registered=self.registered, state=self.state)
        if self.revealed is not None:
            out["revealed"]["valid"] = self.revealed.valid
        return out

    def render(self) -> str:
        lines = [
            f"cacheon miner status  {self.chain}  netuid {self.netuid}  block {self.block}",
            f"  hotkey   {self.hotkey}  " + (f"uid {self.uid}" if self.registered else "NOT REGISTERED"),
        ]
        p, r = self.pending, self.revealed
        if p is not None:
            lines.append(
                f"  pending  until block {p.reveal_block} ({p.blocks_left} blocks), "
                f"committed at {p.commit_block}: {p.digest} {p.url}"
            )
        if r is None:
            lines.append("  revealed none")
        elif r.valid:
            lines.append(f"  revealed at block {r.reveal_block} (committed at {r.commit_block}): {r.digest} {r.url}")
        else:
            lines.append(f"  revealed at block {r.reveal_block} but INVALID for validators: {r.error}")
        for pr in self.probes:
            mark = "serves " if pr.ok else f"BROKEN [{pr.reason}] "
            lines.append(f"  url      {mark}{pr.url}: {pr.detail}")
        if not self.weights:
            lines.append("  weights  no validator-permit hotkeys on this subnet")
        for w in self.weights:
            what = f"error: {w.error}" if w.error else f"{w.weight:.6f}" if w.has_row else "no weights set"
            lines.append(f"  weight   uid {w.uid:<4} {w.hotkey:<20} stake {w.stake:<12.2f} {what}")
        lines += verdicts_mod.render(self.verdicts)
        return "\n".join(lines)


def miner_status(
    backend: ChainBackend,
    netuid: int,
    hotkey: str,
    *,
    state_dir: str | os.PathLike[str] | None = None,
    chain: str | None = None,
    fetch: bool = True,
    timeout_s: float = 60.0,
    verdicts: bool = True,
    verdict_timeout_s: float = verdicts_mod.DEFAULT_TIMEOUT_S,
) -> MinerStatus:
    """Read chain + local record (+ fetch committed URLs when `fetch`, + every validator's verdicts
    from its announced leaderboard when `verdicts`)."""
    label = chain or chain_label(backend)
    state = Path(state_dir) if state_dir is not None else None
    mg = backend.metagraph(netuid)
    uid = mg.uid_of(hotkey)
    block, revealed_c, rec = chain_view(backend, netuid, hotkey, state, label)
    urls = policy_for_backend(backend)
    revealed = None
    if revealed_c is not None:
        try:
            pl = commitment.parse(revealed_c.data, hotkey, urls)
            revealed = RevealedView(revealed_c.commit_block, revealed_c.reveal_block, pl.digest, pl.url)
        except commitment.CommitmentError as exc:
            revealed = RevealedView(revealed_c.commit_block, revealed_c.reveal_block, None, None, str(exc))
    pending = _pending(rec, block)
    targets: list[tuple[str, str]] = []
    for view in (pending, revealed):
        if view is not None and view.digest and view.url and (view.url, view.digest) not in targets:
            targets.append((view.url, view.digest))
    probes = tuple(probe(u, d, timeout_s=timeout_s, urls=urls) for u, d in targets) if fetch else ()
    weights = _weights(backend, netuid, uid, mg) if uid is not None else ()
    report = verdicts_mod.fetch_verdicts(validator_endpoints(mg), hotkey, timeout_s=verdict_timeout_s) if verdicts else ()
    return MinerStatus(label, netuid, block, hotkey, uid, revealed, pending, probes, weights, report)


def _pending(rec: SubmissionRecord | None, block: int) -> PendingView | None:
    if rec is None:
        return None
    return PendingView(rec.digest, rec.url, rec.commit_block, rec.reveal_block, rec.reveal_block - block)


def _weights(backend: ChainBackend, netuid: int, uid: int, mg: Any) -> tuple[ValidatorWeight, ...]:
    out = []
    for n in mg.neurons:
        if not n.validator_permit:
            continue
        try:
            row = backend.get_weights(netuid, n.hotkey)
        except ChainError as exc:
            out.append(ValidatorWeight(n.uid, n.hotkey, n.stake, 0.0, False, str(exc)))
            continue
        out.append(ValidatorWeight(n.uid, n.hotkey, n.stake, float(row.get(uid, 0.0)), bool(row)))
    return tuple(out)
