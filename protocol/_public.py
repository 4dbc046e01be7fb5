"""Public paths for public names (the pattern of trio's ``fixup_module_metadata``).

A class or function defined in a private module (``protocol._errors``) and re-exported
by a public one (``protocol``) keeps its private ``__module__`` unless told otherwise,
so tracebacks, ``repr`` of a class and documentation tools would print a path nobody
should import from. Each public module calls :func:`fixup_module_metadata` once, after
its imports, with its ``__all__``. A parent package runs before its submodules, so a
name exported at the top and again in a submodule (``protocol.Event`` and
``protocol.events.Event``) takes the shorter path.

A class's string annotations (``from __future__ import annotations``) are looked up
in the module its ``__module__`` names, by msgspec when it first builds a decoder and
by ``typing.get_type_hints``; the public module does not hold the names they use
(``Any``, a private helper). So before a class moves, its own annotations are evaluated
in the private module it was written in, and kept evaluated.

This module imports nothing of ``actors``: ``actors``' public modules call it too.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterable, Mapping

__all__ = ["fixup_module_metadata"]


def _is_private_path(module: str, root: str) -> bool:
    parts = module.split(".")
    return parts[0] == root and any(part.startswith("_") for part in parts[1:])


def _evaluate_annotations(cls: type, module: str) -> None:
    annotations = vars(cls).get("__annotations__")
    if not isinstance(annotations, dict) or not annotations:
        return
    source = sys.modules.get(module)
    if source is None:
        return
    scope = dict(vars(cls))
    evaluated: dict[str, object] = {}
    for name, annotation in annotations.items():
        # A name only imported under TYPE_CHECKING was never resolvable at run time:
        # its annotation stays a string, as it was.
        with contextlib.suppress(NameError):
            if isinstance(annotation, str):
                annotation = eval(annotation, vars(source), scope)
        evaluated[name] = annotation
    cls.__annotations__ = evaluated


def fixup_module_metadata(
    module_name: str, namespace: Mapping[str, object], names: Iterable[str]
) -> None:
    """Give each of ``names`` in ``namespace`` the public ``__module__`` ``module_name``.

    Only classes and functions whose ``__module__`` is a private module of the same
    top-level package (``protocol._memory`` for ``protocol.compaction``) change; the
    methods and nested classes of such a class follow it. ``__name__`` and
    ``__qualname__`` are left alone, so pickling (which looks a class up by module and
    qualified name), msgspec's tags and ``repr`` see the same class as before. A moved
    class's own string annotations are evaluated first, where they were written.

    Args:
        module_name: the public module, e.g. ``"protocol.events"``.
        namespace: that module's globals.
        names: the names to fix, its ``__all__``.
    """
    root = module_name.split(".")[0]
    seen: set[int] = set()

    def fix(obj: object) -> None:
        if id(obj) in seen or not isinstance(obj, type | types.FunctionType):
            return
        seen.add(id(obj))
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or not _is_private_path(module, root):
            return
        if isinstance(obj, type):
            _evaluate_annotations(obj, module)
        obj.__module__ = module_name
        if isinstance(obj, type):
            for member in vars(obj).values():
                # A classmethod or staticmethod wraps its function.
                fix(getattr(member, "__func__", member))

    for name in names:
        fix(namespace[name])
