"""The validator's public, read-only web face: a leaderboard page and a JSON API over its state DB.

Off unless asked for (`--leaderboard HOST:PORT` on the validator, or `cacheon leaderboard` over
an existing state dir). data.py reads the DB read-only (SQLite `mode=ro`), plots.py and page.py
render server-side (inline SVG, no script, no CDN: the page works offline), server.py is the
aiohttp app with a per-client-IP token bucket (ratelimit.py). The API contract is
cacheon_subnet.webapi.
"""
