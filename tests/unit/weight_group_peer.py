"""An explorer's end of the weight-sync group as a process of its own, for the tests.

`python -m tests.unit.weight_group_peer ADDRESS TIMEOUT_S ID [SYNC_METHOD [DEVICE]]` joins the
group (with the transport of SYNC_METHOD, nccl if not given; receiving on DEVICE, the CPU if not
given) and prints one line per version it receives whole: `got VERSION TOKEN SHA256` (the sha256 of
the tensors' bytes in the layout's order), until its stdin closes; a line `leave` on stdin closes
the member (it prints `left`) while the process goes on, and a line `hang-after-answer` makes it
stop for good at the next generation it answers, before it makes its end of the transport (it
prints `armed`). `Peer` starts one and reads what it
reports, `send_until` sends versions until one reaches the members asked for, and `weights` makes a
version's tensors: the CPU tests and the GPU check (tests/gpu) drive the group with them.
"""

from __future__ import annotations

import hashlib
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from rft.fault_points import ENV
from rft.synchronizer.weight_group import WeightGroupHost, WeightGroupMember

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 5.0
# a few seconds of sends in a loop: plenty for a process to start and join on a loaded machine
JOIN_DEADLINE_S = 120.0


def digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over names and raw bytes, in the mapping's order."""
    h = hashlib.sha256()
    for name, tensor in tensors.items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def main() -> None:
    address, timeout_s, member_id = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    sync_method = sys.argv[4] if len(sys.argv) > 4 else "nccl"
    device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    member = WeightGroupMember(
        address, timeout_s, member_id, device=device, sync_method=sync_method
    )
    closed = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "leave":  # the explorer closes its end; the process lives on
                member.close()
                print("left", flush=True)
            elif line.strip() == "hang-after-answer":
                os.environ[ENV] = "weight_group.answered:3600"
                print("armed", flush=True)
        closed.set()

    threading.Thread(target=commands, daemon=True).start()
    print("joining", flush=True)
    while not closed.is_set():
        received = member.take()
        if received is not None:
            print(f"got {received.version} {received.token} {digest(received.tensors)}", flush=True)
        time.sleep(0.02)
    member.close()


class Peer:
    """A member process and the versions it reported."""

    def __init__(
        self,
        address: str,
        member_id: str,
        sync_method: str = "nccl",
        timeout_s: float = TIMEOUT_S,
        device: str = "cpu",
    ) -> None:
        self.member_id = member_id
        self.proc = subprocess.Popen(  # noqa: S603 - our own module
            [
                sys.executable,
                "-m",
                "tests.unit.weight_group_peer",
                address,
                str(timeout_s),
                member_id,
                sync_method,
                device,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.got: dict[int, tuple[int, str]] = {}  # version -> (token, digest)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, version: int) -> tuple[int, str]:
        """Wait for this member's report of `version` (it was sent to it)."""
        while version not in self.got:
            line = self.lines.get(timeout=JOIN_DEADLINE_S)
            if line.startswith("got "):
                _, v, token, sha = line.split()
                self.got[int(v)] = (int(token), sha)
        return self.got[version]

    def drain(self) -> None:
        """Read what it reported so far."""
        while True:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                return
            if line.startswith("got "):
                _, v, token, sha = line.split()
                self.got[int(v)] = (int(token), sha)

    def leave(self) -> None:
        """Close its member and wait until it says so; the process goes on."""
        self._command("leave", "left")

    def _command(self, command: str, answer: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        while (line := self.lines.get(timeout=JOIN_DEADLINE_S)) != answer:
            if line.startswith("got "):
                _, v, token, sha = line.split()
                self.got[int(v)] = (int(token), sha)

    def hang_after_answer(self) -> None:
        """Have it stop, alive, right after it answers the next generation (before its end of
        the transport exists), and wait until it says it will."""
        self._command("hang-after-answer", "armed")

    def stop(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def weights(version: int, mib: int = 1) -> dict[str, torch.Tensor]:
    """HF-like tensors of two dtypes, different for each version."""
    g = torch.Generator().manual_seed(version)
    n = mib * 2**18
    return {
        "model.embed_tokens.weight": torch.randn(n // 64, 64, generator=g),
        "model.layers.0.mlp.up_proj.weight": torch.randn(n // 32, 32, generator=g).to(
            torch.bfloat16
        ),
        "model.norm.weight": torch.randn(64, generator=g),
    }


def send_until(host: WeightGroupHost, members: set[str], first: int) -> tuple[int, dict]:
    """Send versions first, first+1, ... until one reaches exactly `members`; returns that
    version and every version's reached list."""
    reached: dict[int, list[str]] = {}
    deadline = time.monotonic() + JOIN_DEADLINE_S
    version = first
    while time.monotonic() < deadline:
        reached[version] = host.send(version, 1000 + version, weights(version))
        if set(reached[version]) == members:
            return version, reached
        version += 1
        time.sleep(0.3)
    raise AssertionError(f"no version reached {members} in {JOIN_DEADLINE_S}s: {reached}")


if __name__ == "__main__":
    main()
