"""Publishing weights: compute, send with the chain's version key, read back, record.

Rules, and why:
* The version key sent is this code's spec version (cacheon_subnet.__spec_version__), so the
  subnet owner can retire old validators by raising weights_version_key. The chain's key is
  read before every send: below it we do not send (the chain would silently drop the weights,
  as it did for an implementation that sent 1 while the chain wanted 29) and say "outdated".
* The chain rate limit (WeightsSetRateLimit from LastUpdate) is checked before sending and a
  RateLimited answer is "wait", not an error. Unchanged weights are re-sent every
  `interval_blocks` so the validator stays active.
* A `pending` row is written before set_weights. After a crash it is resolved from the chain:
  if LastUpdate moved past its creation and the chain holds its vector, it landed (no resend);
  otherwise it is sent again, so one vector is never published twice in one window.
* A send that raised anything but a definitive refusal stays `pending`: it may have landed, so
  the next pass reads the chain back (`_resolve`) before it sends again, never blindly.
* A definitive refusal (no validator permit, not registered, version key...) is recorded in
  the state DB (`weights_blocked`, shown by `cacheon status`) and set_weights is not sent again
  for `refusal_hold_blocks`, or until the metagraph shows the permit.
* Read-back: get_weights must hold what we sent (u16, +-1 for rounding); otherwise `failed`
  (after `readback_grace_blocks`, for commit-reveal subnets whose weights show up later).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cacheon_subnet import __spec_version__
from cacheon_subnet.chain.backend import RateLimited
from cacheon_subnet.scoring.weights import U16_MAX, WeightPolicy, compute_weights, to_u16
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.chainguard import ChainDown, GuardedChain
from cacheon_subnet.validator.ledger import WeightsRow
from cacheon_subnet.validator.state import StateDB


@dataclass(frozen=True)
class PublishPolicy:
    interval_blocks: int = 360  # re-send unchanged weights this often (one tempo)
    readback_grace_blocks: int = 0  # >0 on commit-reveal subnets (weights appear after reveal)
    min_change_u16: int = 328  # a vector differing by less (0.5 %, e.g. age decay) is "unchanged"
    refusal_hold_blocks: int = 360  # after a definitive refusal, wait this long before asking again
    version_key: int | None = None  # None: this code's cacheon_subnet.__spec_version__
    dry_run: bool = False  # --dry-run: everything but set_weights (the vector is logged, not sent)


@dataclass(frozen=True)
class PublishResult:
    action: str  # verified | published | failed | deferred | unchanged | rate_limited | resolved | refused | blocked | outdated | dry_run
    weights_id: int | None
    detail: str


def readback_check(uids: Sequence[int], vals: Sequence[int], got: Mapping[int, float]) -> tuple[bool, dict[str, Any]]:
    """Does the chain's row hold (uids, vals)? Both are compared as max-upscaled u16, +-1."""
    top = max(got.values(), default=0.0)
    chain = {int(u): int(round(float(v) / top * U16_MAX)) for u, v in got.items()} if top > 0 else {}
    chain = {u: v for u, v in chain.items() if v > 0}
    sent = {int(u): int(v) for u, v in zip(uids, vals, strict=True) if v > 0}
    diffs = {
        u: (sent.get(u, 0), chain.get(u, 0))
        for u in sorted(set(sent) | set(chain))
        if abs(sent.get(u, 0) - chain.get(u, 0)) > 1
    }
    detail = {
        "chain": {str(u): v for u, v in sorted(chain.items())},
        "mismatch": {str(u): list(p) for u, p in diffs.items()},
    }
    return not diffs, detail


def same_vector(a: WeightsRow, uids: Sequence[int], vals: Sequence[int], tolerance: int = 1) -> bool:
    return a.uids == tuple(uids) and all(abs(x - y) <= tolerance for x, y in zip(a.vals, vals, strict=True))


class Publisher:
    def __init__(
        self,
        db: StateDB,
        chain: GuardedChain,
        netuid: int,
        hotkey: str,
        targets: Sequence[str],
        weights: WeightPolicy,
        policy: PublishPolicy,
    ) -> None:
        self.db, self.chain, self.netuid, self.hotkey = db, chain, netuid, hotkey
        self.targets, self.weights, self.policy = tuple(targets), weights, policy

    def desired(self, block: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        mg = self.chain.metagraph(self.netuid)
        owner = self.chain.owner_uid(self.netuid)
        vector = compute_weights(
            ledger.crowns(self.db), self.targets, {n.hotkey: n.uid for n in mg.neurons}, owner, block, self.weights
        )
        return to_u16(vector)

    def step(self) -> PublishResult:
        block = self.chain.current_block()
        carry = self._resolve(block)
        if isinstance(carry, PublishResult):
            return carry
        held = self._held(block)
        if held is not None:
            return held
        uids, vals = self.desired(block)
        landed = ledger.last_weights(self.db, ("published", "verified", "failed"))
        if (
            carry is None
            and landed is not None
            and landed.state != "failed"
            and landed.block is not None
            and same_vector(landed, uids, vals, self.policy.min_change_u16)
            and block - landed.block < self.policy.interval_blocks
        ):
            return PublishResult("unchanged", landed.id, f"same vector sent at block {landed.block}")
        last = self.chain.last_weights_block(self.netuid, self.hotkey)
        limit = self.chain.weights_rate_limit(self.netuid)
        if last is not None and block - last < limit:
            return PublishResult(
                "rate_limited", None, f"last update {last}, limit {limit}: retry in {limit - (block - last)} blocks"
            )
        required = self.chain.weights_version_key(self.netuid)  # the owner's floor (hyperparameter)
        version_key = self.policy.version_key if self.policy.version_key is not None else __spec_version__
        if version_key < required:  # definitive: sending would be dropped; only an upgrade helps
            return PublishResult(
                "outdated",
                None,
                f"spec version {version_key} < the subnet's weights_version_key "
                f"{required}: this validator is retired; upgrade (docs/operators.md, Upgrades)",
            )
        if self.policy.dry_run:
            return PublishResult(
                "dry_run", None, f"--dry-run: not sent: uids {list(uids)} weights {list(vals)} version_key {version_key}"
            )
        if carry is not None and carry.uids == tuple(uids) and carry.vals == tuple(vals):
            row = carry
            ledger.update_weights(
                self.db, row.id, "pending", "re-sending after restart", version_key=version_key, attempt=True
            )
        else:
            if carry is not None:
                ledger.update_weights(self.db, carry.id, "deferred", "never landed; replaced by a newer vector")
            row = ledger.open_weights(self.db, block, version_key, uids, vals)
        return self._send(row, uids, vals, version_key)

    def _send(self, row: WeightsRow, uids: Sequence[int], vals: Sequence[int], version_key: int) -> PublishResult:
        try:
            receipt = self.chain.set_weights(self.hotkey, self.netuid, list(uids), [float(v) for v in vals], version_key)
        except RateLimited as exc:
            ledger.update_weights(self.db, row.id, "deferred", f"rate limited: {exc}")
            return PublishResult("deferred", row.id, str(exc))
        except ChainDown as exc:
            if not exc.definitive:
                raise  # may have landed: the pending row is read back next pass before any resend
            reason = getattr(exc.cause, "reason", type(exc.cause).__name__)
            why = f"refused, definitive ({reason}): {exc.cause}"
            ledger.update_weights(self.db, row.id, "failed", why)
            block = self.chain.current_block()
            self.db.put(
                "weights_blocked",
                json.dumps({"reason": reason, "detail": str(exc.cause)[:500], "block": block, "weights_id": row.id}),
            )
            return PublishResult(
                "refused",
                row.id,
                f"{why}; not sent again for {self.policy.refusal_hold_blocks} blocks (or until the cause is gone)",
            )
        self.db.put("weights_blocked", "")
        ledger.update_weights(self.db, row.id, "published", "accepted", block=receipt.block)
        return self._readback(row.id, uids, vals, receipt.block, receipt.block)

    def _held(self, block: int) -> PublishResult | None:
        """While a definitive refusal holds, nothing is sent (the metagraph granting the
        permit, or the hold running out, lifts it)."""
        raw = self.db.get("weights_blocked") or ""
        if not raw:
            return None
        info = json.loads(raw)
        waited = block - int(info["block"])
        if waited >= self.policy.refusal_hold_blocks:
            return None  # ask the chain once more
        if info["reason"] in ("no_validator_permit", "sdk:NeuronNoValidatorPermit"):
            mg = self.chain.metagraph(self.netuid)
            me = next((n for n in mg.neurons if n.hotkey == self.hotkey), None)
            if me is not None and me.validator_permit:
                return None
        return PublishResult(
            "blocked",
            info.get("weights_id"),
            f"set_weights refused at block {info['block']} "
            f"({info['reason']}: {info['detail'][:200]}); next try in "
            f"{self.policy.refusal_hold_blocks - waited} blocks",
        )

    def _readback(self, wid: int, uids: Sequence[int], vals: Sequence[int], sent_block: int, now: int) -> PublishResult:
        ok, detail = readback_check(uids, vals, self.chain.get_weights(self.netuid, self.hotkey))
        if ok:
            ledger.update_weights(self.db, wid, "verified", "read-back matches", readback=detail)
            return PublishResult("verified", wid, f"published at block {sent_block}, read-back matches")
        waited = now - sent_block
        if waited < self.policy.readback_grace_blocks:
            ledger.update_weights(
                self.db, wid, "published", f"read-back not matching yet ({waited} blocks)", readback=detail
            )
            return PublishResult("published", wid, "waiting for the chain to show the weights")
        why = f"read-back mismatch {waited} blocks after sending: chain dropped or altered the weights"
        ledger.update_weights(self.db, wid, "failed", why, readback=detail)
        return PublishResult("failed", wid, why)

    def _resolve(self, block: int) -> WeightsRow | PublishResult | None:
        """Settle rows a previous pass (or process) left open. Returns a pending row that never
        landed (to re-send), a result to stop this pass at, or None."""
        row = ledger.last_weights(self.db)
        if row is None or row.state not in ("pending", "published"):
            return None
        if row.state == "published":
            assert row.block is not None
            return self._readback(row.id, row.uids, row.vals, row.block, block)
        last = self.chain.last_weights_block(self.netuid, self.hotkey)
        if last is not None and last >= row.created_block:  # it landed before we could record it
            ledger.update_weights(self.db, row.id, "published", "landed before a restart", block=last)
            return self._readback(row.id, row.uids, row.vals, last, block)
        return row
