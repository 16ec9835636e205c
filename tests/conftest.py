"""Shared fixtures: `stack` (the real local Kafka + MinIO, started lazily once per session),
`zipkin` (the stack's optional Zipkin trace server, likewise) and `unique` (a fresh short name per
test for topics, buckets and groups).

With RFT_KAFKA_BOOTSTRAP or RFT_S3_ENDPOINT set, `stack` points at that external stack and starts
nothing. Otherwise it runs `LocalStack.up()` on the default root and, at session end, stops what
this session started, unless another live session still holds a lease on the stack or
RFT_STACK_KEEP=1 asks to leave it running.

Under pytest-xdist (`make test` runs two workers) each worker is such a session: the workers of
one run note what any of them started in a file they share, so the last one to leave stops it,
and the topics of earlier killed runs are deleted under a lock that every worker takes before
its lease, so no worker's fresh topics are among them.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.errors import RftError
from rft.events.transport import kafka_backend
from rft.stack import LocalStack, StackLease

EXTERNAL_STACK_ENV = ("RFT_KAFKA_BOOTSTRAP", "RFT_S3_ENDPOINT")
UNIQUE_HEX = 10
# a name part made by `unique`: "t" and ten hex digits, between dots, dashes or the ends
UNIQUE_NAME = re.compile(rf"(^|[.\-_])t[0-9a-f]{{{UNIQUE_HEX}}}([.\-_]|$)")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackSettings]:
    if any(os.environ.get(name) for name in EXTERNAL_STACK_ENV):
        yield StackSettings()  # the settings read the external endpoints from the environment
        return
    local = LocalStack()
    started = _StartedServices(tmp_path_factory, "stack")
    with _starting(local):
        lease = StackLease(local.layout.leases).acquire()
        try:
            result = local.up()
            started.note(result.started)
            settings = local.stack_settings()
            if not lease.others_alive():
                _delete_topics_of_earlier_sessions(settings)
        except BaseException:
            lease.release()
            raise
    try:
        yield settings
    finally:
        lease.release()
    _stop_if_last(local, lease, started)


@pytest.fixture(scope="session")
def zipkin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The local stack's Zipkin server (`rft stack up --with zipkin`), started on first use and
    stopped at session end like `stack`'s servers; its base URL (`http://127.0.0.1:<port>`)."""
    local = LocalStack()
    started = _StartedServices(tmp_path_factory, "zipkin")
    lease = StackLease(local.layout.leases).acquire()
    try:
        started.note(local.up(services=["zipkin"]).started)
        yield f"http://127.0.0.1:{local.settings.zipkin_port}"
    finally:
        lease.release()
    _stop_if_last(local, lease, started)


class _StartedServices:
    """The services this run of pytest started, in a file that all its xdist workers share (the
    parent of each worker's base temp dir), so that whichever worker leaves last stops them;
    without xdist, in memory."""

    def __init__(self, factory: pytest.TempPathFactory, what: str) -> None:
        shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
        self.path = factory.getbasetemp().parent / f"started-{what}.json" if shared else None
        self.mine: set[str] = set()

    def note(self, services: tuple[str, ...] | list[str]) -> None:
        self.mine.update(services)
        if self.path is not None and services:
            with _flock(self.path.with_suffix(".lock")):
                self.path.write_text(json.dumps(sorted(self.mine | self.all())))

    def all(self) -> set[str]:
        found = set(self.mine)
        if self.path is not None and self.path.exists():
            found.update(json.loads(self.path.read_text()))
        return found


def _stop_if_last(local: LocalStack, lease: StackLease, started: _StartedServices) -> None:
    services = started.all()
    keep = os.environ.get("RFT_STACK_KEEP") == "1"
    if services and not keep and not lease.others_alive():
        local.down(sorted(services))


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def _starting(local: LocalStack) -> Iterator[None]:
    """Held from taking a lease to the end of the cleanup of earlier runs' topics: a session
    that finds no other lease deletes every `unique` topic it lists, so no other session may
    take its lease (and make topics) in between."""
    with _flock(local.layout.root / "tests-start.lock"):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the tests that declare a timeout longer than the suite's (the long fault runs)
    are placed so that neither worker waits long on the other at the end: `make test-faults`'s
    worksteal hands the first half of the list to one worker and the second half to the other,
    so the longest goes first (its worker starts it at once) and the others last (the other
    worker reaches them after its short ones, and an idle worker takes tests from the end of a
    busy one's queue). A single process runs them in the collected order."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    default = float(config.getini("timeout") or 0)

    def declared(item: pytest.Item) -> float:
        mark = item.get_closest_marker("timeout")
        return float(mark.args[0]) if mark is not None and mark.args else default

    long = sorted((i for i in items if declared(i) > default), key=declared, reverse=True)
    if long:
        rest = [i for i in items if declared(i) <= default]
        items[:] = [long[0], *rest, *long[1:]]


@pytest.fixture(autouse=True)
def _reached_addresses(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """Each test keeps its own record of the addresses rft processes reached (first contact
    waits out an outage only at an address reached before): a closed port that one test uses as
    "nothing there" must not be one another test's private stack once answered on."""
    record = tmp_path_factory.mktemp("reached") / "reached.json"
    monkeypatch.setenv("RFT_REACHED_FILE", str(record))


@dataclass
class _ModuleTopics:
    """The `unique` names this module's tests used on the session stack."""

    names: list[str] = field(default_factory=list)
    stack: StackSettings | None = None


@pytest.fixture(scope="module")
def _module_topics() -> Iterator[_ModuleTopics]:
    """At the end of a module, its tests' topics on the session stack are deleted: every partition
    keeps files open and index files mapped in the broker, and a suite's thousand tests would
    otherwise pile up thousands of partitions in one broker (and across runs on the same root)."""
    held = _ModuleTopics()
    yield held
    if held.stack is not None:
        _delete_topics(held.stack, lambda topic: any(name in topic for name in held.names))


@pytest.fixture
def unique(request: pytest.FixtureRequest, _module_topics: _ModuleTopics) -> Iterator[str]:
    """Lowercase letters and digits only: valid as a topic, bucket, group or key part."""
    name = "t" + uuid.uuid4().hex[:UNIQUE_HEX]
    yield name
    if "stack" in request.fixturenames:
        _module_topics.names.append(name)
        _module_topics.stack = request.getfixturevalue("stack")


@pytest.fixture(scope="module")
def module_unique(stack: StackSettings, _module_topics: _ModuleTopics) -> str:
    """One `unique` name shared by a module's tests (e.g. one server process they all call),
    its topics deleted with the module's."""
    name = "t" + uuid.uuid4().hex[:UNIQUE_HEX]
    _module_topics.names.append(name)
    _module_topics.stack = stack
    return name


def _delete_topics_of_earlier_sessions(stack: StackSettings) -> None:
    """A session killed before its tests' teardown leaves their topics on the default root, and
    the next session on that root would start with them all loaded in the broker."""
    _delete_topics(stack, lambda topic: UNIQUE_NAME.search(topic) is not None)


def _delete_topics(stack: StackSettings, doomed: Callable[[str], bool]) -> None:
    try:
        with kafka_backend(stack.kafka).admin() as admin:
            names = [t for t in admin.list_topics(timeout_s=10.0) if doomed(t)]
            for start in range(0, len(names), 500):  # one request per 500 keeps each one small
                admin.delete_topics(names[start : start + 500], timeout_s=60.0)
    except RftError as exc:  # a test that leaves the broker unreachable has failed already
        warnings.warn(f"could not delete test topics: {exc}", stacklevel=1)
