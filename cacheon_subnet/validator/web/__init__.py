"""The validator's public, read-only web face: a leaderboard page and a JSON API over its state.

Off unless asked for (`--leaderboard HOST:PORT` on the validator, or `cacheon leaderboard` over
an existing state dir). Either way it is served by a process of its own (supervisor.py starts
child.py behind the sandbox wall: its own uid, no network of its own, rlimits) from a snapshot
of the state DB (snapshot.py) that the web uid can read and never write. data.py reads it (or a
state dir, read-only, in tests), plots.py and page.py render server-side (inline SVG, no script,
no CDN: the page works offline), server.py is the aiohttp app with a per-client token bucket
(ratelimit.py) behind the connection bounds of cacheon_subnet.connguard. The API contract is
cacheon_subnet.webapi.
"""
