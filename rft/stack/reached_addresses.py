"""Reached addresses: the service addresses this machine's rft processes have reached before.

First contact (rft/contact/first_contact.py) must tell a config error from an outage without
reaching the service: a typo'd or never-started address fails in seconds, while a process that
a supervisor restarts in the middle of a broker or object-store outage must wait within the
outage window like the processes that were already running. The difference is history: an
address some rft process on this machine has reached before is a service that went away. The
record is one small JSON file (`$RFT_REACHED_FILE`, else `reached.json` under the default stack
root), written atomically; losing it only makes the next failed first contact fail fast.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from rft.config.connections import default_stack_root


def reached_file() -> Path:
    env = os.environ.get("RFT_REACHED_FILE")
    return Path(env) if env else default_stack_root() / "reached.json"


def _read(path: Path) -> dict[str, list[str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): [str(a) for a in v] for k, v in data.items() if isinstance(v, list)}


def was_reached(service: str, address: str) -> bool:
    """Whether an rft process on this machine has reached `service` at `address` before."""
    return address in _read(reached_file()).get(service, [])


def remember_reached(service: str, address: str) -> None:
    """Record that `service` answered at `address` (once; a failure to write is not an error:
    the record only changes how a later failed first contact is reported)."""
    path = reached_file()
    known = _read(path)
    if address in known.get(service, []):
        return
    known.setdefault(service, []).append(address)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as tmp:
            json.dump(known, tmp)
        os.replace(tmp.name, path)
    except OSError:
        pass
