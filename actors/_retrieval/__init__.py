"""The one retrieval engine: every search kind, the recall kind, fusion, BM25, speaker and
time focus, entity links, and the rules every door shares (public as ``actors.doors``)."""
