"""Process groups across the custom-op boundary: a collective kernel gets a ProcessGroup, but a
torch custom op (what Dynamo and CUDA graphs see) can only carry a string.

So the op carries the group's *name* and its body resolves the name back to the group, as
SGLang's own `inplace_all_reduce(tensor, group_name)` does. Names are either torch's c10d
group names (`ProcessGroup.group_name`, what verify uses) or `<prefix><name>` for a resolver a
seam registered (SGLang's `GroupCoordinator.unique_name` -> its `device_group`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Resolver = Callable[[str], Any]
_RESOLVERS: dict[str, Resolver] = {}


def register_resolver(prefix: str, resolve: Resolver) -> None:
    """Route names starting with `prefix` to `resolve(rest)` (idempotent per prefix)."""
    if not prefix or prefix[-1] not in "/:":
        raise ValueError(f"resolver prefix {prefix!r} must end with '/' or ':'")
    _RESOLVERS[prefix] = resolve


def group_name(group: Any) -> str:
    """The string a custom op carries for `group` (a ProcessGroup, or already a name)."""
    if isinstance(group, str):
        return group
    name = getattr(group, "group_name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"collective kernels need a torch.distributed ProcessGroup, got {type(group).__name__}")
    return name


def resolve_group(name: str) -> Any:
    """The ProcessGroup behind `name`; raises (never guesses) when it is unknown."""
    for prefix, resolve in _RESOLVERS.items():
        if name.startswith(prefix):
            group = resolve(name[len(prefix) :])
            if group is None:
                raise LookupError(f"process group {name!r} is not known (or was destroyed)")
            return group
    from torch.distributed import distributed_c10d

    return distributed_c10d._resolve_process_group(name)
