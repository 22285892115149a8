"""The normal form of a CUDA C++ source (.cu, .cuh) for the copy identity: comments and layout
gone, the file's own identifiers renamed by first appearance, literals spelled canonically.

Why: the identity (normalize.py) catches Python copies with renamed names and rewritten comments;
without this, a CUDA source counted by its bytes, so the same trick on a .cu file escaped it.
Why only the file's own identifiers: renaming is never allowed to merge two programs that
behave differently, and an identifier the file does not declare (sqrtf, __shfl_xor_sync,
threadIdx, a header's macro) is the behaviour itself, so it is kept verbatim. An identifier
counts as declared where it follows a type-like token and precedes `(`, `=`, `,`, `;`, `)`,
`[`, `:` or `{` (a variable, parameter, function, template parameter, struct), or is named by
`#define`; keywords, `__x`/`_X` reserved names, ALL_CAPS names and CUDA's built-in variables
never are. Literals keep their value (0x10 and 16 are one literal, 1.0f and 1.f too; 0.5 and
0.25 are not). Linear in the source (one regex pass, bounded input: bundle/limits.py CudaLimits).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""(?P<ws>\s+)|(?P<comment>//[^\n]*|/\*(?:[^*]|\*(?!/))*(?:\*/|\Z))
    |(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<num>(?:0[xX][0-9a-fA-F']+|(?:\d[\d']*\.?[\d']*|\.\d[\d']*)(?:[eE][+-]?\d+)?)[uUlLfF]*)
    |(?P<ident>[A-Za-z_]\w*)|(?P<punct>::|->|<<=|>>=|[-+*/%&|^!=<>]=|&&|\|\||\+\+|--|<<|>>|\#\#|.)""",
    re.X | re.S,
)
KEYWORDS = frozenset(
    """alignas alignof auto bool break case char const constexpr const_cast continue decltype default delete do
    double dynamic_cast else enum explicit extern false float for friend goto if inline int long mutable namespace
    new noexcept nullptr operator private protected public register reinterpret_cast return short signed sizeof
    static static_assert static_cast struct switch template this throw true typedef typename union unsigned using
    virtual void volatile while define include pragma ifdef ifndef endif elif undef once unroll
    threadIdx blockIdx blockDim gridDim warpSize""".split()
)
_STATEMENT = frozenset({"return", "case", "goto", "else", "do", "throw", "new", "delete", "sizeof", "co_return"})
_AFTER = frozenset({"(", "=", ",", ";", ")", "[", ":", "{"})
_TYPE_LIKE_PUNCT = frozenset({"*", "&", ">", "&&"})


def tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) of every token but whitespace and comments."""
    return [(m.lastgroup or "", m.group()) for m in _TOKEN.finditer(text) if m.lastgroup not in ("ws", "comment")]


def _keep(name: str) -> bool:
    return name in KEYWORDS or name.startswith("__") or bool(re.match(r"_[A-Z]", name)) or name.isupper()


def declared(toks: list[tuple[str, str]]) -> set[str]:
    """The identifiers this source declares (by the rule in the module docstring)."""
    out = set()
    for i, (kind, text) in enumerate(toks):
        if kind != "ident" or _keep(text) or i == 0:
            continue
        prev_kind, prev = toks[i - 1]
        after = toks[i + 1][1] if i + 1 < len(toks) else ";"
        if prev == "define" or (prev in ("struct", "typename", "class") and after not in ("::",)):
            out.add(text)
        elif after in _AFTER and prev not in _STATEMENT:
            if prev_kind == "ident" or (prev in _TYPE_LIKE_PUNCT and after != "(" and _type_before(toks, i - 1)):
                out.add(text)
    return out


def _type_before(toks: list[tuple[str, str]], j: int) -> bool:
    """`T* x` / `const float* x`: the token before the `*`/`&` run is a type name, not an operand."""
    while j >= 0 and toks[j][1] in _TYPE_LIKE_PUNCT:
        j -= 1
    if j < 0 or toks[j][0] != "ident" or toks[j][1] in _STATEMENT:
        return False
    before = toks[j - 1] if j else ("punct", ";")
    return before[1] in ";{}(,<" or (before[1] in KEYWORDS and before[1] not in _STATEMENT)


def _number(text: str) -> str:
    text = text.replace("'", "")
    is_hex = text[:2] in ("0x", "0X")
    body, suffix = re.match(r"(.*?)([uUlL]*)$" if is_hex else r"(.*?)([uUlLfF]*)$", text).groups()  # type: ignore[union-attr]
    try:
        if is_hex or not re.search(r"[.eE]", body):
            value = str(int(body, 16 if is_hex else 8 if len(body) > 1 and body[0] == "0" else 10))
        else:
            value = repr(float(body))
    except ValueError:
        value = body
    return value + "".join(sorted(suffix.lower()))


def normal_form(data: bytes) -> str:
    """The source's tokens, space-separated, own identifiers as `#<n>` (no source can spell it)."""
    text = data.decode("utf-8", errors="replace")
    toks = tokens(text)
    own = declared(toks)
    names: dict[str, str] = {}
    out = []
    for i, (kind, t) in enumerate(toks):
        if kind == "ident" and t in own and not (i and toks[i - 1][1] in (".", "->")):
            out.append(names.setdefault(t, f"#{len(names)}"))
        elif kind == "num":
            out.append(_number(t))
        else:
            out.append(t)
    return " ".join(out)
