"""`cacheon miner submit`: verify locally, pack, publish, commit timelocked, remember it.

A miner never commits what validators would reject: the bundle must PASS `verify_bundle`
first. The archive is the deterministic `pack` output named `<digest>.tar.gz`, either in a
directory the miner serves itself or uploaded by the miner to an https URL of its choice.
The commitment is `commitment.encode(digest, hotkey, url)`, sealed for `reveal_after_blocks`.

Re-committing the same digest and URL is refused by default: the chain keeps one commitment
per hotkey and the commit block orders submissions, so a re-commit would only lose priority.
Pending commitments are invisible on chain, so a small JSON record under the miner state dir
(`$CACHEON_MINER_STATE`, default ~/.cacheon/miner) tells `status` what was submitted.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from cacheon_subnet.bundle.digest import hotkey_bound_digest
from cacheon_subnet.chain import commitment
from cacheon_subnet.chain.backend import ChainBackend, ChainError, Commitment, NotRegistered
from cacheon_subnet.env import MINER_STATE
from cacheon_subnet.errors import BundleError, CacheonError
from cacheon_subnet.log import get_logger
from cacheon_subnet.miner.serve import DEFAULT_HOST, DEFAULT_PORT, archive_name, base_url, probe
from cacheon_subnet.netpolicy import STRICT, UrlPolicy, policy_for_backend

DEFAULT_REVEAL_BLOCKS = 20  # ~4 min at 12 s/block: long enough to hide content, short to wait
DEFAULT_BASE_URL = base_url(DEFAULT_HOST, DEFAULT_PORT)
STATE_ENV = MINER_STATE.name
RECORDS_FILE = "submissions.json"
MAX_RECORDS = 200

log = get_logger("cacheon.miner.submit")


class SubmitError(CacheonError):
    """Submission refused. `reason` is a stable id; `reasons` lists e.g. the verify failures."""

    def __init__(
        self,
        reason: str,
        detail: str,
        reasons: tuple[str, ...] = (),
        report: Any = None,
        codes: tuple[str, ...] = (),
        sent: bool = False,
    ) -> None:
        self.reason = reason
        self.sent = sent  # the commit extrinsic went out: it may have landed, never re-send blindly
        self.detail = detail
        self.reasons = reasons
        self.report = report
        self.codes = codes  # verify reason codes (verify.REASONS), e.g. ("mismatch",)
        lines = [f"submit refused [{reason}]: {detail}"] + [f"  - {r}" for r in reasons]
        super().__init__("\n".join(lines))


class MinerStateError(CacheonError):
    """The local submission record file is unreadable or malformed."""


# -- the local record ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmissionRecord:
    """What this machine committed. reveal_block is commit_block + delay (approximate on the
    real chain, where the drand round decides)."""

    chain: str
    netuid: int
    hotkey: str
    digest: str
    bound: str
    url: str
    archive: str | None
    commit_block: int
    reveal_block: int
    reveal_after_blocks: int
    submitted_at: float
    source: str
    ops: tuple[str, ...]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubmissionRecord:
        names = {f.name for f in fields(cls)}
        missing = names - set(obj)
        if missing:
            raise ValueError(f"missing fields {sorted(missing)}")
        values = {k: obj[k] for k in names}
        values["ops"] = tuple(values["ops"])
        return cls(**values)


def default_state_dir() -> Path:
    return Path(MINER_STATE.get())


def chain_label(backend: ChainBackend) -> str:
    """Which chain a record belongs to: local:<abs path> or bittensor:<network>."""
    path = getattr(backend, "path", None)
    if path is not None:
        return f"local:{Path(path).resolve()}"
    network = getattr(backend, "network", None)
    if network is not None:
        return f"bittensor:{network}"
    return type(backend).__name__


def load_records(state_dir: Path | None = None) -> list[SubmissionRecord]:
    path = (state_dir or default_state_dir()) / RECORDS_FILE
    if not path.exists():
        return []
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        return [SubmissionRecord.from_json(r) for r in obj["records"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MinerStateError(f"{path}: unreadable submission records ({exc}); move it aside to start fresh") from exc


def latest_record(state_dir: Path | None, chain: str, netuid: int, hotkey: str) -> SubmissionRecord | None:
    mine = [r for r in load_records(state_dir) if r.chain == chain and r.netuid == netuid and r.hotkey == hotkey]
    return mine[-1] if mine else None


def _append_record(state_dir: Path | None, record: SubmissionRecord) -> Path:
    """Append under an flock and replace the file atomically (a crash keeps the old one)."""
    root = state_dir or default_state_dir()
    root.mkdir(parents=True, exist_ok=True)
    path = root / RECORDS_FILE
    with open(root / (RECORDS_FILE + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        records = load_records(root) + [record]
        body = {"version": 1, "records": [asdict(r) for r in records[-MAX_RECORDS:]]}
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    return path


# -- what the chain currently holds ---------------------------------------------------------


def chain_view(
    backend: ChainBackend, netuid: int, hotkey: str, state_dir: Path | None = None, chain: str | None = None
) -> tuple[int, Commitment | None, SubmissionRecord | None]:
    """(block, the hotkey's revealed commitment, our still-sealed submission if any).

    A record counts as pending while commit_block <= block < reveal_block; a record from a
    chain that was reset (block now below its commit block) is ignored.
    """
    block = backend.current_block()
    revealed = next((c for c in backend.revealed_commitments(netuid) if c.hotkey == hotkey), None)
    rec = latest_record(state_dir, chain or chain_label(backend), netuid, hotkey)
    pending = rec if rec is not None and rec.commit_block <= block < rec.reveal_block else None
    return block, revealed, pending


def _already(
    revealed: Commitment | None,
    pending: SubmissionRecord | None,
    hotkey: str,
    digest: str,
    url: str,
    urls: UrlPolicy = STRICT,
) -> str | None:
    """Why committing digest+url again would be pointless (None: it would not be)."""
    if pending is not None:
        if (pending.digest, pending.url) == (digest, url):
            return f"pending until block {pending.reveal_block} (committed at {pending.commit_block})"
        return None  # a different submission is sealed; this one replaces it
    if revealed is not None:
        try:
            p = commitment.parse(revealed.data, hotkey, urls)
        except commitment.CommitmentError:
            return None
        if (p.digest, p.url) == (digest, url):
            return f"revealed at block {revealed.reveal_block} (committed at {revealed.commit_block})"
    return None


# -- submit ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitResult:
    status: str  # "committed" | "already_committed"
    digest: str
    bound: str
    hotkey: str
    uid: int
    netuid: int
    url: str
    archive: str | None
    payload: str
    commit_block: int | None
    reveal_block: int | None
    note: str
    verify_seconds: float | None = None
    record: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        head = {"committed": "committed", "already_committed": "already committed"}[self.status]
        lines = [
            f"cacheon miner submit: {head}  contribution {self.bound}",
            f"  (the contribution id validators show = sha256(bundle digest + hotkey); bundle digest "
            f"{self.digest} is the content alone)",
            f"  hotkey {self.hotkey} (uid {self.uid}, netuid {self.netuid})",
            f"  url    {self.url}",
        ]
        if self.archive:
            lines.append(f"  archive {self.archive}")
        lines.append(f"  {self.note}")
        return "\n".join(lines)


def submit(
    bundle_dir: str | os.PathLike[str],
    *,
    backend: ChainBackend,
    netuid: int,
    hotkey: str,
    url: str | None = None,
    serve_dir: str | os.PathLike[str] | None = None,
    base_url: str = DEFAULT_BASE_URL,
    reveal_after_blocks: int = DEFAULT_REVEAL_BLOCKS,
    verify_device: str = "cpu",
    verify_options: Any = None,
    check_url: bool = False,
    state_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> SubmitResult:
    """Verify, pack and commit `bundle_dir` for `hotkey`; raises SubmitError naming the rule.

    Exactly one of `url` (you upload the archive there) or `serve_dir` (the archive lands in
    that directory, committed as `base_url/<digest>.tar.gz`). `check_url` fetches the URL and
    requires its content digest to match before committing.
    """
    state = Path(state_dir) if state_dir is not None else None
    if (url is None) == (serve_dir is None):
        raise SubmitError("usage", "give exactly one of url= (you host the archive) or serve_dir= (self-hosted)")
    if int(reveal_after_blocks) < 1:
        raise SubmitError("usage", f"reveal_after_blocks={reveal_after_blocks}; must be >= 1")
    bundle = _load(bundle_dir)
    digest = bundle.digest
    if url is None:
        url = f"{base_url.rstrip('/')}/{archive_name(digest)}"
    urls = policy_for_backend(backend)  # loopback URLs only on a local chain
    try:
        commitment.check_url(url, urls)
    except commitment.CommitmentError as exc:
        raise SubmitError("url", f"{url!r}: {exc} (chain policy: {urls.label})") from exc

    uid = _registered_uid(backend, netuid, hotkey)
    label = chain_label(backend)
    try:
        _, revealed, pending = chain_view(backend, netuid, hotkey, state, label)
    except ChainError as exc:
        raise SubmitError(f"chain:{exc.reason}", f"cannot read commitments: {exc}") from exc
    archive = _archive_path(serve_dir, state, digest)
    already = None if force else _already(revealed, pending, hotkey, digest, url, urls)
    if already is not None:
        if not archive.exists():
            _pack(bundle_dir, archive, digest)  # a restart keeps serving what is committed
        cb = pending.commit_block if pending else revealed.commit_block  # type: ignore[union-attr]
        rb = pending.reveal_block if pending else revealed.reveal_block  # type: ignore[union-attr]
        log.info("submit.already_committed", digest=digest, url=url, detail=already)
        return SubmitResult(
            "already_committed",
            digest,
            hotkey_bound_digest(digest, hotkey),
            hotkey,
            uid,
            netuid,
            url,
            str(archive),
            commitment.encode(digest, hotkey, url, urls),
            cb,
            rb,
            f"already committed: {already}; nothing sent (force re-commits and resets the commit block, losing priority)",
        )

    if check_url and serve_dir is None:  # cheap refusal before the slow verify
        _pack(bundle_dir, archive, digest)
        _check_served(url, digest, archive, urls)
    seconds = _verify(bundle, verify_device, verify_options)
    if serve_dir is not None or not check_url:
        _pack(bundle_dir, archive, digest)  # self-hosted: only verified bundles land in serve_dir
    if check_url and serve_dir is not None:
        _check_served(url, digest, archive, urls)
    payload = commitment.encode(digest, hotkey, url, urls)
    commitment.parse(payload, hotkey, urls)  # what validators will run; must accept our own payload
    try:
        commit_block = backend.commit(hotkey, netuid, payload, int(reveal_after_blocks))
    except NotRegistered as exc:
        raise SubmitError("not_registered", str(exc)) from exc
    except ChainError as exc:
        # Sent: it may have landed. Never re-sent blindly (neurons/miner.py does not retry this);
        # `cacheon miner status` reads the chain back.
        raise SubmitError(
            f"chain:{exc.reason}",
            f"commit failed: {exc}; it may still have landed: check `cacheon miner status` before submitting again",
            sent=True,
        ) from exc
    reveal_block = commit_block + int(reveal_after_blocks)
    record = SubmissionRecord(
        chain=label,
        netuid=netuid,
        hotkey=hotkey,
        digest=digest,
        bound=hotkey_bound_digest(digest, hotkey),
        url=url,
        archive=str(archive),
        commit_block=commit_block,
        reveal_block=reveal_block,
        reveal_after_blocks=int(reveal_after_blocks),
        submitted_at=time.time(),
        source=str(Path(bundle_dir).resolve()),
        ops=tuple(o.key for o in bundle.manifest.ops),
    )
    record_path = _append_record(state, record)
    log.info("submit.committed", digest=digest, url=url, commit_block=commit_block, reveal_block=reveal_block, uid=uid)
    hosting = (
        "serve it: cacheon miner serve --dir " + str(Path(archive).parent)
        if serve_dir is not None
        else f"keep {archive} uploaded at the url"
    )
    return SubmitResult(
        "committed",
        digest,
        record.bound,
        hotkey,
        uid,
        netuid,
        url,
        str(archive),
        payload,
        commit_block,
        reveal_block,
        f"sealed until block {reveal_block}; {hosting}",
        seconds,
        str(record_path),
    )


def _load(bundle_dir: str | os.PathLike[str]) -> Any:
    from cacheon_subnet.bundle import load_bundle

    try:
        return load_bundle(bundle_dir)
    except BundleError as exc:
        if exc.rule == "not-found":  # a mistyped path is a usage error (exit 2), as in every verb
            raise SubmitError("usage", str(exc)) from exc
        reason = "manifest" if exc.rule.startswith("manifest") else "bundle"
        raise SubmitError(reason, f"{bundle_dir}: {exc}") from exc


def _registered_uid(backend: ChainBackend, netuid: int, hotkey: str) -> int:
    try:
        uid = backend.metagraph(netuid).uid_of(hotkey)
    except ChainError as exc:
        raise SubmitError(f"chain:{exc.reason}", f"cannot read netuid {netuid}: {exc}") from exc
    if uid is None:
        raise SubmitError(
            "not_registered",
            f"hotkey {hotkey!r} has no uid on netuid {netuid}; register it first (validators only read registered hotkeys)",
        )
    return uid


def _archive_path(serve_dir: Any, state: Path | None, digest: str) -> Path:
    root = Path(serve_dir) if serve_dir is not None else (state or default_state_dir()) / "archives"
    if root.exists() and not root.is_dir():
        raise SubmitError("usage", f"{root} exists and is not a directory")
    return root / archive_name(digest)


def _pack(bundle_dir: Any, archive: Path, digest: str) -> None:
    from cacheon_subnet.bundle import pack

    try:
        packed = pack(bundle_dir, archive)
    except BundleError as exc:
        raise SubmitError("bundle", f"{bundle_dir}: {exc}") from exc
    if packed.digest != digest:
        archive.unlink(missing_ok=True)
        raise SubmitError(
            "changed", f"{bundle_dir} changed while submitting (digest {digest} -> {packed.digest}); run submit again"
        )


def _check_served(url: str, digest: str, archive: Path, urls: UrlPolicy = STRICT) -> None:
    pr = probe(url, digest, urls=urls)
    if not pr.ok:
        raise SubmitError(
            "url_mismatch", f"{url} does not serve bundle {digest}: [{pr.reason}] {pr.detail}; upload {archive} there first"
        )


def _verify(bundle: Any, device: str, options: Any) -> float:
    from cacheon_subnet.verify import VerifyOptions, verify_bundle
    from cacheon_subnet.verify.native_gate import check_native, has_cuda

    if has_cuda(bundle):  # compiled behind the wall + static checks; its trials run on a GPU validator
        t0 = time.monotonic()
        native = check_native(bundle)
        log.info("submit.verify", digest=bundle.digest, status="FAIL" if native.failed else "NOT_RUN")
        if native.failed:
            raise SubmitError(
                "verify",
                f"{bundle.source} FAILS verify; validators would reject it, nothing was committed",
                tuple(native.reasons),
            )
        return time.monotonic() - t0
    opts = options if options is not None else VerifyOptions(device=device)
    if opts.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SubmitError("usage", "verify device cuda requested but no CUDA device is visible")
    report = verify_bundle(bundle, opts)
    log.info("submit.verify", digest=bundle.digest, status=report.status, seconds=round(report.duration_s, 2))
    if not report.passed:
        reasons = tuple(report.reasons) + tuple(f"policy {f}" for f in report.findings)
        codes = (
            ("policy",) if report.findings else tuple(dict.fromkeys(op.failure.reason for op in report.ops if op.failure))
        )
        raise SubmitError(
            "verify",
            f"{bundle.source} FAILS verify on {opts.device}; validators would reject it, nothing was committed",
            reasons,
            report,
            codes,
        )
    return report.duration_s
