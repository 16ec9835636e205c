"""The engine-ready signal: a file a rollout engine writes once it is up, for its launcher.

A launcher that starts other processes on a rollout engine's GPU names a file in the engine
process's environment (`ENGINE_READY_FILE_ENV`) and starts them once the file exists: vLLM sizes
its memory from the GPU's free memory while it starts, and its memory profiling fails when
another process's usage changes meanwhile. Light on purpose: the supervisor imports it without
torch.
"""

from __future__ import annotations

import os
from pathlib import Path

ENGINE_READY_FILE_ENV = "RFT_ENGINE_READY_FILE"


def announce_ready(what: str) -> None:
    """Write the ready file this process's environment names, if any, with `what` in it."""
    path = os.environ.get(ENGINE_READY_FILE_ENV)
    if path:
        Path(path).write_text(f"{what}\n", encoding="utf-8")
