"""The trainer: a consumer of Experience events that batches, trains, checkpoints and announces weight versions."""
