"""Grade what was timed: the host picks, after the fact, which outputs of the timed windows the
pristine teacher T scores. The engine cannot tell a graded window from any other (every generate
step reaches it in one form, arena/jobs.py), and the sample is drawn by the host with the OS's
randomness only once every window has run (arena/engine/record_reader.py answers the driver's outputs_ready),
so a kernel that is cheap and wrong while timed is graded on exactly those outputs.

A sampled C output is paired with the same prompt in its mirror baseline window (jobs.mirror):
C and B are compared on the same inputs.
"""

from __future__ import annotations

import secrets
from typing import Any

from arena.verdict import quality as q


class TeacherAlignmentError(RuntimeError):
    """T's teacher-forced tokens do not line up with the role's continuation (a harness bug)."""


def choose(kept: dict[str, int], pairs: dict[str, str], n: int) -> tuple[tuple[str, str, int], ...]:
    """n (C window tag, baseline window tag, prompt index) triples, uniformly without replacement
    over every prompt of every timed C window that has a kept mirror."""
    pool = [(c, b, i) for c, b in sorted(pairs.items()) if c in kept and b in kept for i in range(min(kept[c], kept[b]))]
    rng = secrets.SystemRandom()
    return tuple(sorted(rng.sample(pool, min(n, len(pool)))))


def request(sample: tuple[tuple[str, str, int], ...]) -> dict[str, Any]:
    """The driver's sample request: per window tag, the prompt indices to return."""
    want: dict[str, set[int]] = {}
    for c, b, i in sample:
        want.setdefault(c, set()).add(i)
        want.setdefault(b, set()).add(i)
    return {"sample": {tag: sorted(keys) for tag, keys in sorted(want.items())}}


def role_sequences(
    sample: tuple[tuple[str, str, int], ...], returned: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """{"C": [...], "B": [...]}: the k-th sampled pair gets key k in both roles."""
    by = {tag: {int(s["key"]): s for s in seqs} for tag, seqs in returned.items()}
    out: dict[str, list[dict[str, Any]]] = {"C": [], "B": []}
    for k, (c, b, i) in enumerate(sample):
        for role, tag in (("C", c), ("B", b)):
            s = by.get(tag, {}).get(i)
            if s is None:
                raise TeacherAlignmentError(f"the driver returned no output for {tag} prompt {i}")
            out[role].append({**s, "key": k})
    return out


def sequences(role_seqs: list[dict[str, Any]], graded: list[dict[str, Any]]) -> list[q.Sequence]:
    by_key = {g["key"]: g for g in graded}
    out = []
    for s in role_seqs:
        g = by_key.get(s["key"])
        if g is None:
            raise TeacherAlignmentError(f"T returned nothing for sequence {s['key']}")
        cont, toks, top = s["cont"], g["tokens"], g["top"]
        off = next((o for o in range(3) if [t for t, _ in toks[o : o + len(cont)]] == cont), None)
        if off is None:
            raise TeacherAlignmentError(
                f"sequence {s['key']}: T's tokens {[t for t, _ in toks[:5]]}… do not match the continuation {cont[:5]}…"
            )
        top = top[len(top) - len(toks) + off :] if len(top) >= len(toks) else top
        own = s.get("logprobs") or []
        own_top = s.get("top") or []
        positions = []
        for i, tok in enumerate(cont):
            t_top = tuple((int(a), float(b)) for a, b in (top[i] if i < len(top) else []))
            if not t_top:
                raise TeacherAlignmentError(f"sequence {s['key']} position {i}: T returned no top-k")
            positions.append(
                q.Position(
                    token=int(tok),
                    role_logprob=float(own[i][1]) if i < len(own) else None,
                    role_top=tuple((int(a), float(b)) for a, b in (own_top[i] if i < len(own_top) else [])),
                    teacher_logprob=float(toks[off + i][1]),
                    teacher_top=t_top,
                )
            )
        out.append(q.Sequence(prompt_id=int(s["key"]), positions=tuple(positions)))
    return out
