"""Replay: bounded reads of logged topics, and experiences exported, filtered, mirrored and re-scored."""
