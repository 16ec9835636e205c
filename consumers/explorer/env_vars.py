"""`explorer.env_vars`: environment variables an explorer process sets for itself, and so for the
libraries it loads and any process it starts.

Several are read once, when a library starts: OMP_NUM_THREADS / MKL_NUM_THREADS when torch is
imported, CUDA_VISIBLE_DEVICES when CUDA starts, HF_HUB_OFFLINE when transformers is imported. So
`rft explore` (also the explorer child of `rft run`, which loads the same config) sets them right
after loading the config and before importing torch; `Explorer.run` sets them again, before it
builds its engine, for programs that construct an Explorer themselves. Values are not logged: they
may hold secrets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

log = logging.getLogger(__name__)


def apply_env_vars(env_vars: Mapping[str, str]) -> None:
    """Set every `explorer.env_vars` entry in this process's environment."""
    changed = []
    for name, value in env_vars.items():
        text = str(value)
        if os.environ.get(name) != text:
            os.environ[name] = text
            changed.append(name)
    if changed:
        log.info("explorer.env_vars: set %s", ", ".join(sorted(changed)))
