"""The `memory` transport on the CPU: versions shared through /dev/shm with member processes.

The trainer's end (`WeightGroupHost` with `sync_method="memory"`) runs in the test; explorers'
ends run as `tests.unit.weight_group_peer` processes, unrelated to this one (not forked by
multiprocessing). What a member receives equals what was sent, bit for bit, with the version's
token; a second version follows, and a third is written into the buffer of the second, which
every member acknowledged; a member killed or stopped costs the trainer one bounded wait
and the next versions reach the living member without one, while the stopped one, let go on,
drops the version whose buffer is gone and joins again; the trainer keeps a version's buffer
until every member acknowledged it (or the timeout passed, when it is let go of at once, since a
member may still read it) and leaves none behind once closed; a member that
cannot use the trainer's transport never joins. The CUDA IPC side of the transport is not run
here (no GPU).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from rft.engines.fsdp_ranks import free_port
from rft.synchronizer.shared_memory import SharedMemoryTransport
from rft.synchronizer.weight_group import WeightGroupHost, WeightGroupMember
from tests.unit.weight_group_peer import Peer, digest, send_until, weights

TIMEOUT_S = 3.0


@pytest.fixture
def host() -> Iterator[WeightGroupHost]:
    group = WeightGroupHost(f"127.0.0.1:{free_port()}", TIMEOUT_S, sync_method="memory")
    yield group
    group.close()


def peers(host: WeightGroupHost, *ids: str) -> list[Peer]:
    return [Peer(f"127.0.0.1:{host.port}", i, "memory", TIMEOUT_S) for i in ids]


def buffers() -> list[Path]:
    """This trainer's shared weight buffers that exist now."""
    return sorted(Path("/dev/shm").glob(f"rft-weights-*-{os.getpid()}-*"))


def test_versions_arrive_bit_for_bit_with_their_tokens(host: WeightGroupHost) -> None:
    a, b = peers(host, "a", "b")
    try:
        first, _ = send_until(host, {"a", "b"}, 1)
        second = first + 1
        assert sorted(host.send(second, 7, weights(second))) == ["a", "b"]
        for peer in (a, b):
            assert peer.expect(first) == (1000 + first, digest(weights(first)))
            assert peer.expect(second) == (7, digest(weights(second)))
        # every member acknowledged: the next version is written into the same buffer
        kept = buffers()
        assert len(kept) == 1
        third = second + 1
        assert sorted(host.send(third, 8, weights(third))) == ["a", "b"]
        assert buffers() == kept
        for peer in (a, b):
            assert peer.expect(third) == (8, digest(weights(third)))
        host.close()
        assert buffers() == []
    finally:
        a.stop()
        b.stop()


def test_the_buffer_stays_until_the_member_acknowledges(host: WeightGroupHost) -> None:
    (a,) = peers(host, "a")
    try:
        joined, _ = send_until(host, {"a"}, 1)
        a.expect(joined)
        os.kill(a.proc.pid, signal.SIGSTOP)  # it reads nothing until it is let go on
        version = joined + 1
        reached: list[str] = []
        sending = threading.Thread(
            target=lambda: reached.extend(host.send(version, 5, weights(version)))
        )
        sending.start()
        time.sleep(1.0)
        assert sending.is_alive()  # waiting for the acknowledgement...
        assert len(buffers()) == 1  # ...with the version's buffer kept
        os.kill(a.proc.pid, signal.SIGCONT)
        sending.join(timeout=TIMEOUT_S + 5)
        assert not sending.is_alive()
        assert reached == ["a"]  # it read the buffer after a pause, whole
        assert a.expect(version) == (5, digest(weights(version)))
        assert len(buffers()) == 1  # acknowledged, so kept for the next version
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_a_dead_or_hung_member_costs_one_bounded_wait(host: WeightGroupHost, fault: str) -> None:
    a, b = peers(host, "a", "b")
    try:
        joined, _ = send_until(host, {"a", "b"}, 1)
        b.expect(joined)
        os.kill(b.proc.pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        version = joined + 1
        started = time.monotonic()
        reached = host.send(version, 9, weights(version))
        waited = time.monotonic() - started
        assert reached == ["a"]
        assert TIMEOUT_S - 0.5 < waited < TIMEOUT_S + 2.0  # one timeout, for b
        assert buffers() == []  # let go of once the timeout passed
        # the next version forms a generation without b and costs no wait
        started = time.monotonic()
        assert host.send(version + 1, 10, weights(version + 1)) == ["a"]
        assert time.monotonic() - started < TIMEOUT_S / 2
        assert host.members == ["a"]
        for v, token in ((version, 9), (version + 1, 10)):
            assert a.expect(v) == (token, digest(weights(v)))
        if fault == "hung":
            # let go on, it finds the version it missed gone (it never had it in part), says so,
            # and joins again
            os.kill(b.proc.pid, signal.SIGCONT)
            rejoined, _ = send_until(host, {"a", "b"}, version + 2)
            assert b.expect(rejoined) == (1000 + rejoined, digest(weights(rejoined)))
            b.drain()
            assert version not in b.got and version + 1 not in b.got
    finally:
        if fault == "hung":
            os.kill(b.proc.pid, signal.SIGKILL)
        a.stop()
        b.stop()


def test_a_member_that_cannot_use_the_transport_never_joins(host: WeightGroupHost) -> None:
    other = WeightGroupMember(f"127.0.0.1:{host.port}", TIMEOUT_S, "x", sync_method="nccl")
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert host.send(1, 1, weights(1)) == []
            time.sleep(0.1)
        assert other.generations_joined == 0
    finally:
        other.close()
    elsewhere = {"host": "another-host/0", "shares": "cpu"}
    assert "another" in str(SharedMemoryTransport().refuses(elsewhere, torch.device("cpu")))
    here = SharedMemoryTransport().describe(torch.device("cpu"))
    assert SharedMemoryTransport().refuses(here, torch.device("cpu")) is None
