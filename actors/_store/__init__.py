"""The store as every backend shares it: the one handle, the ``Backend`` seam below it
and the public ``Store`` protocol, the single-writer mailbox, the lifecycle, batch
validation and sizes, events, index texts and indexing."""
