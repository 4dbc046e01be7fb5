"""The one retrieval engine: every search kind, the recall kind, fusion, BM25, speaker and
time focus, and entity links (the rules every door shares are public: ``actors.doors``)."""
