"""The explorer: a consumer group of the tasks topic that turns Task events into Experience events, and what it follows (weights, sync, evaluation)."""
