"""The store as every backend shares it: the handle, the single-writer mailbox, the
lifecycle, batch validation and sizes, events, index texts and indexing."""
