"""The `python` tool: a model's program run by rft.tools.python_sandbox under DEFAULT_LIMITS.

A config that offers it is refused at load where the fence cannot be set (`require_sandbox`).
"""

from __future__ import annotations

from typing import Annotated

from rft.tools.python_sandbox import SandboxLimits, run_python
from rft.tools.registry import ToolText, tool
from rft.tools.sandbox_support import fenced_isolation, require_sandbox

DEFAULT_LIMITS = SandboxLimits()


@tool(
    "python",
    check_ready=require_sandbox,
    description=(
        "Run a Python 3 program in a sandbox and return what it prints: no network, no writes "
        f"outside its own directory, {DEFAULT_LIMITS.cpu_s} s of CPU, "
        f"{DEFAULT_LIMITS.memory_mb} MiB of memory, {DEFAULT_LIMITS.wall_s:g} s in all, "
        f"at most {DEFAULT_LIMITS.output_bytes} bytes of output."
    ),
)
def python(
    code: Annotated[str, "A complete Python 3 program. Print what you want to see."],
) -> str:
    """The `python` tool: `code` run under DEFAULT_LIMITS; the outcome rides on the ToolText."""
    run = run_python(code, DEFAULT_LIMITS, fenced_isolation())
    return ToolText(run.report(), run.outcome)
