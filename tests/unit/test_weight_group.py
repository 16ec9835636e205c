"""The weight-sync group over gloo, with explorers' ends as processes of their own.

The trainer's end (`WeightGroupHost`, rank 0) runs in the test; each explorer's end
(`WeightGroupMember`) in a `tests.unit.weight_group_peer` process on localhost. What a member
receives is what was sent (sha256 of every tensor's bytes, and the version's token); a member
gets exactly the versions whose `send` names it; one that joins late starts at the next version;
a member that dies or hangs costs the trainer one bounded `synchronizer.weight_group_timeout`,
after which the group goes on with the living; one closed by its explorer while its process
lives on costs no wait at all, and one that hangs before a new generation is formed is left out
of it after one timeout while the others get the version; one that hangs after answering a
generation, before making its end, fails that version's send within one timeout. `synchronizer.weight_group_address` is where the
trainer hosts the rendezvous.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import pytest

from rft.engines.fsdp_ranks import free_port
from rft.errors import ConfigError
from rft.synchronizer.weight_group import WeightGroupHost, split_address
from tests.unit.weight_group_peer import TIMEOUT_S, Peer, digest, send_until, weights


@pytest.fixture
def host() -> Iterator[WeightGroupHost]:
    group = WeightGroupHost(f"127.0.0.1:{free_port()}", TIMEOUT_S)
    yield group
    group.close()


def address_of(host: WeightGroupHost) -> str:
    return f"127.0.0.1:{host.port}"


def test_members_receive_each_version_as_sent(host: WeightGroupHost) -> None:
    a, b = Peer(address_of(host), "a"), Peer(address_of(host), "b")
    try:
        first, reached = send_until(host, {"a", "b"}, 1)
        second = first + 1
        assert sorted(host.send(second, 7, weights(second))) == ["a", "b"]
        for peer in (a, b):
            assert peer.expect(first) == (1000 + first, digest(weights(first)))
            assert peer.expect(second) == (7, digest(weights(second)))
    finally:
        a.stop()
        b.stop()


# 44 s of regrouping; tests/integration/test_fast_weights.py has a late joiner load from the
# store in the default suite
@pytest.mark.slow
def test_a_late_joiner_gets_only_versions_sent_to_it(host: WeightGroupHost) -> None:
    a = Peer(address_of(host), "a")
    b = None
    try:
        joined_a, reached = send_until(host, {"a"}, 1)
        b = Peer(address_of(host), "b")
        joined_b, later = send_until(host, {"a", "b"}, joined_a + 1)
        reached.update(later)
        b.expect(joined_b)
        a.expect(joined_b)
        a.drain()
        b.drain()
        # a member receives a version exactly when the trainer's send names it
        for peer in (a, b):
            sent_to = {v for v, names in reached.items() if peer.member_id in names}
            assert set(peer.got) == sent_to, (peer.member_id, peer.got.keys(), reached)
        assert min(b.got) == joined_b > joined_a  # what it missed comes from the store
    finally:
        a.stop()
        if b is not None:
            b.stop()


@contextlib.contextmanager
def two_members(host: WeightGroupHost) -> Iterator[tuple[Peer, Peer, int]]:
    """Members a and b, and the first version both received; at the end b is killed (a test
    may have left it stopped, which no closed stdin ends) and both are reaped."""
    a, b = Peer(address_of(host), "a"), Peer(address_of(host), "b")
    try:
        joined, _ = send_until(host, {"a", "b"}, 1)
        b.expect(joined)
        yield a, b, joined
    finally:
        if b.proc.poll() is None:
            os.kill(b.proc.pid, signal.SIGKILL)
        a.stop()
        b.stop()


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_a_dead_or_hung_member_costs_one_bounded_wait(host: WeightGroupHost, fault: str) -> None:
    with two_members(host) as (a, b, joined):
        # killed: its sockets close; hung: it holds them open and reads nothing
        os.kill(b.proc.pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        # 8 MiB per tensor: more than the socket buffers hold, so a send to b blocks
        version = joined + 1
        reached = host.send(version, 1, weights(version, mib=8))
        assert "b" not in reached, reached  # the trainer knows it did not reach b
        # the trainer goes on: the next versions reach the living member alone
        after, more = send_until(host, {"a"}, version + 1)
        assert a.expect(after) == (1000 + after, digest(weights(after)))
        a.drain()
        sent_to_a = {v for v, names in {version: reached, **more}.items() if "a" in names}
        assert sent_to_a <= set(a.got)


def test_a_member_that_hangs_before_a_new_generation_is_left_out_of_it(
    host: WeightGroupHost,
) -> None:
    with two_members(host) as (a, b, joined):
        os.kill(b.proc.pid, signal.SIGSTOP)
        # new shapes: a new generation, whose ends b would never make (gloo's wait for it in
        # the group's setup, NCCL's without a timeout at the first broadcast)
        version = joined + 1
        started = time.monotonic()
        reached = host.send(version, 6, weights(version, mib=2))
        waited = time.monotonic() - started
        assert reached == ["a"]
        assert waited < TIMEOUT_S + 2.0  # one timeout for b's answer
        assert host.members == ["a"]
        assert a.expect(version) == (6, digest(weights(version, mib=2)))


def test_a_member_that_hangs_after_answering_costs_one_bounded_wait(
    host: WeightGroupHost,
) -> None:
    with two_members(host) as (a, b, joined):
        b.hang_after_answer()
        # new shapes: a new generation, which b answers and then never makes its end of (gloo
        # waits for it in the group's setup; NCCL at the first broadcast, non-blocking)
        version = joined + 1
        started = time.monotonic()
        reached = host.send(version, 7, weights(version, mib=2))
        waited = time.monotonic() - started
        assert reached == []  # the generation failed as a whole: the store carries the version
        assert waited < TIMEOUT_S + 2.0
        # the trainer goes on: a joins again and gets the next versions; b stays out
        after, _ = send_until(host, {"a"}, version + 1)
        assert a.expect(after) == (1000 + after, digest(weights(after)))
        assert host.members == ["a"]


def test_a_member_closed_while_its_process_lives_costs_no_wait(host: WeightGroupHost) -> None:
    with two_members(host) as (a, b, joined):
        b.leave()  # its sockets stay open: a broadcast to it would block until the timeout
        version = joined + 1
        started = time.monotonic()
        # 8 MiB per tensor: more than the socket buffers hold
        assert host.send(version, 2, weights(version, mib=8)) == ["a"]
        assert time.monotonic() - started < TIMEOUT_S / 2
        assert host.members == ["a"]
        assert a.expect(version) == (2, digest(weights(version, mib=8)))


def test_an_address_taken_or_not_host_port_names_its_key(host: WeightGroupHost) -> None:
    with pytest.raises(ConfigError, match="synchronizer.weight_group_address: cannot host"):
        WeightGroupHost(address_of(host), TIMEOUT_S)
    assert split_address("10.0.0.5:29517") == ("10.0.0.5", 29517)
    for bad in ("10.0.0.5", "host:port", ":29517", "h:70000"):
        with pytest.raises(ConfigError, match="synchronizer.weight_group_address"):
            split_address(bad)
