"""supervisor: runs the explorer and trainer as separate processes for `rft run`."""
