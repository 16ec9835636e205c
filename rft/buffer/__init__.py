"""buffer: how the trainer turns a stream of experiences into batches (groups, staleness, replay)."""
