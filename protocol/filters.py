"""The filter language as a tree of nodes (design §9): build a ``Filter`` from these, or
write it as a dict (``parse_filter`` turns one into the other). ``Filter``, ``FilterNode``
and ``parse_filter`` are also at the top of ``protocol``."""

from ._filters import And as And
from ._filters import Eq as Eq
from ._filters import Exists as Exists
from ._filters import Filter as Filter
from ._filters import FilterNode as FilterNode
from ._filters import Gt as Gt
from ._filters import Gte as Gte
from ._filters import In as In
from ._filters import Lt as Lt
from ._filters import Lte as Lte
from ._filters import Ne as Ne
from ._filters import Nin as Nin
from ._filters import Not as Not
from ._filters import Or as Or
from ._filters import parse_filter as parse_filter

__all__ = [
    "And",
    "Eq",
    "Exists",
    "Filter",
    "FilterNode",
    "Gt",
    "Gte",
    "In",
    "Lt",
    "Lte",
    "Ne",
    "Nin",
    "Not",
    "Or",
    "parse_filter",
]

from ._public import fixup_module_metadata as _fixup_module_metadata

_fixup_module_metadata(__name__, globals(), __all__)
