"""Plugin modules: the parts a user registers in modules listed under `plugins` (or in the
RFT_PLUGINS environment variable) are imported before any name in the config is checked, so they
can be selected like built-in ones. A module is a dotted name or a .py file relative to the
config file's folder; an error in it is reported against its config entry.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from rft.config.binding import Issue
from rft.config.schema import RftConfig

PLUGINS_ENV = "RFT_PLUGINS"  # more plugin modules, separated by commas


def plugin_names(cfg: RftConfig) -> list[tuple[str, str]]:
    """(config path, module) for `plugins` and then the RFT_PLUGINS environment variable."""
    named = [(f"plugins[{i}]", name) for i, name in enumerate(cfg.plugins)]
    extra = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    return named + [(f"${PLUGINS_ENV}", name) for name in extra]


def import_plugins(cfg: RftConfig, base_dir: Path | None = None) -> list[Issue]:
    """Import each plugin module (a dotted name, or a .py file relative to `base_dir`)."""
    issues = []
    for path, name in plugin_names(cfg):
        try:
            _import_plugin(name, base_dir)
        except Exception as exc:  # any error in user code is reported against its config entry
            issues.append(
                Issue(path, f"cannot import plugin {name!r}: {type(exc).__name__}: {exc}")
            )
    return issues


def _import_plugin(name: str, base_dir: Path | None) -> None:
    if not name.endswith(".py"):
        importlib.import_module(name)
        return
    file = Path(name).expanduser()
    if not file.is_absolute() and base_dir is not None:
        file = base_dir / file
    file = file.resolve()
    module_name = f"rft_plugin_{file.stem}_{abs(hash(str(file))):x}"
    if module_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
