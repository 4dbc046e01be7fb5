"""The actors' messages, for those who log, replay or route them (design §7)."""

from ._messages import Clear as Clear
from ._messages import Cleared as Cleared
from ._messages import Compress as Compress
from ._messages import Compressed as Compressed
from ._messages import Dedupe as Dedupe
from ._messages import Delete as Delete
from ._messages import DocumentsUpserted as DocumentsUpserted
from ._messages import Forget as Forget
from ._messages import Forgotten as Forgotten
from ._messages import Inject as Inject
from ._messages import Msg as Msg
from ._messages import Recall as Recall
from ._messages import StoreReply as StoreReply
from ._messages import StoreRequest as StoreRequest
from ._messages import StoreTurns as StoreTurns
from ._messages import Supersede as Supersede
from ._messages import TurnsStored as TurnsStored
from ._messages import UpsertDocuments as UpsertDocuments

__all__ = [
    "Clear",
    "Cleared",
    "Compress",
    "Compressed",
    "Dedupe",
    "Delete",
    "DocumentsUpserted",
    "Forget",
    "Forgotten",
    "Inject",
    "Msg",
    "Recall",
    "StoreReply",
    "StoreRequest",
    "StoreTurns",
    "Supersede",
    "TurnsStored",
    "UpsertDocuments",
]

from ._public import fixup_module_metadata as _fixup_module_metadata

_fixup_module_metadata(__name__, globals(), __all__)
