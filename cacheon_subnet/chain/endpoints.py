"""Where a validator's leaderboard lives, announced on chain as its axon (SDK `ServeAxon`).

Why the axon and not a commitment: it is the chain's own record of a neuron's endpoint, every
metagraph read returns it (no extra query per validator), it is separate from the commitment
slot miners use for submissions (a validator's commitment would enter every validator's intake
as a malformed submission), it is not timelocked, and SDK v11 says to publish endpoints this
way. Its limits: an IP and a port only (no host name, no scheme; the API is served over plain
HTTP and is public, read-only data), and the chain's ServingRateLimit, so we re-announce only
when what the metagraph shows differs. Only validator-permit neurons are listed to miners: any
hotkey can serve an axon, but only a permit holder's verdicts move weights.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from cacheon_subnet.chain.backend import ChainBackend, Metagraph, NotRegistered

PROTOCOL = 4  # the SDK's default axon protocol tag (subnet-defined); we publish plain HTTP on it
API_VERSION = 1  # major version of cacheon_subnet.webapi.SCHEMA, stored as the axon's version


@dataclass(frozen=True)
class ValidatorEndpoint:
    uid: int
    hotkey: str
    stake: float
    url: str | None  # http://ip:port, None when the validator announced nothing


def axon_text(ip: str, port: int) -> str:
    """The metagraph's spelling of an endpoint ("ip:port", "[v6]:port")."""
    addr = ipaddress.ip_address(ip)
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def announce(backend: ChainBackend, netuid: int, hotkey: str, ip: str, port: int) -> bool:
    """Serve (ip, port) as hotkey's axon unless the chain already shows exactly that.
    True when a serve_axon call was made. ChainError (rate limit, not registered) propagates."""
    want = axon_text(ip, port)
    mg = backend.metagraph(netuid)
    uid = mg.uid_of(hotkey)
    if uid is None:
        raise NotRegistered(f"cannot announce the leaderboard: hotkey {hotkey!r} is not registered on netuid {netuid}")
    if mg.by_uid(uid).axon == want:
        return False
    backend.serve_axon(hotkey, netuid, str(ipaddress.ip_address(ip)), int(port), protocol=PROTOCOL, version=API_VERSION)
    return True


def validator_endpoints(mg: Metagraph) -> tuple[ValidatorEndpoint, ...]:
    """Every validator-permit neuron and the leaderboard URL its axon announces (if any)."""
    return tuple(
        ValidatorEndpoint(n.uid, n.hotkey, n.stake, f"http://{n.axon}" if n.axon else None)
        for n in mg.neurons
        if n.validator_permit
    )
