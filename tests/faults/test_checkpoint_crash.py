"""Processes killed (SIGKILL) in the middle of a checkpoint write or download, on both backends.

The guarantee under test: a checkpoint version is either complete and verified or invisible, and
a download destination either holds a verified copy or does not exist.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rft.config.connections import ObjectStoreSettings
from rft.errors import CheckpointError
from rft.storage import CheckpointStore, LocalObjectStore, ObjectStore, S3ObjectStore

pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parents[2]
FILES = 6
FILE_SIZE = 16 * 1024 * 1024  # large enough that the kill lands long before the manifest

CHILD = """
import sys
from pathlib import Path
from rft.storage import CheckpointStore, open_object_store
action, uri, src_or_dest = sys.argv[1:4]
with open_object_store(uri) as store:
    ckpts = CheckpointStore(store, "proj", "run")
    if action == "write":
        ckpts.write(1, 10, Path(src_or_dest), [("proj.run.experiences", 0, 5)])
    else:
        ckpts.download(1, Path(src_or_dest))
"""


@dataclasses.dataclass
class Target:
    store: ObjectStore
    uri: str
    env: dict[str, str]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    env = dict(os.environ)
    if request.param == "local":
        store = LocalObjectStore(tmp_path / "store")
        yield Target(store, store.base_uri, env)
        return
    settings: ObjectStoreSettings = request.getfixturevalue("stack").object_store
    unique = request.getfixturevalue("unique")
    s3 = S3ObjectStore(settings, bucket="rft-fault-tests", prefix=f"crash/{unique}")
    env.update(
        RFT_S3_ENDPOINT=settings.endpoint,
        RFT_S3_ACCESS_KEY=settings.access_key,
        RFT_S3_SECRET_KEY=settings.secret_key,
    )
    with s3:
        s3.ensure_bucket()
        yield Target(s3, s3.base_uri, env)
        for info in s3.list():
            s3.delete(info.key)


def _big_model(root: Path) -> Path:
    src = root / "model"
    src.mkdir()
    for i in range(FILES):
        (src / f"shard-{i}.bin").write_bytes(os.urandom(FILE_SIZE))
    return src


def _spawn(action: str, target: Target, path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, action, target.uri, str(path)],
        cwd=REPO,
        env=target.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _kill_when(child: subprocess.Popen[bytes], ready: Callable[[], bool]) -> bool:
    """SIGKILL the child as soon as `ready()`; False if it exited first (the race was lost)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return False
        if ready():
            child.send_signal(signal.SIGKILL)
            child.wait()
            return True
        time.sleep(0.002)
    child.kill()
    child.wait()
    pytest.fail("child neither progressed nor exited within 120 s")


def test_writer_killed_before_manifest_leaves_version_invisible(
    target: Target, tmp_path: Path
) -> None:
    ckpts = CheckpointStore(target.store, "proj", "run")
    src = _big_model(tmp_path)
    child = _spawn("write", target, src)
    killed = _kill_when(child, lambda: bool(target.store.list(ckpts.version_prefix(1))))
    assert child.returncode != 0 or not killed
    has_manifest = target.store.exists(ckpts.version_prefix(1) + "manifest.json")
    if killed and not has_manifest:
        assert ckpts.list_versions() == []
        assert ckpts.latest_version() == 0
        with pytest.raises(CheckpointError, match="no manifest"):
            ckpts.download(1, tmp_path / "dl")
        # the restarted writer completes the same version over the leftovers
        ckpts.write(1, 10, src)
    # either way, what is visible now must be complete and verified
    assert ckpts.list_versions() == [1]
    dest = ckpts.download(1, tmp_path / "dl")
    for i in range(FILES):
        assert (dest / f"shard-{i}.bin").read_bytes() == (src / f"shard-{i}.bin").read_bytes()


def test_downloader_killed_midway_never_publishes_the_destination(
    target: Target, tmp_path: Path
) -> None:
    ckpts = CheckpointStore(target.store, "proj", "run")
    src = _big_model(tmp_path)
    ckpts.write(1, 10, src)
    dest = tmp_path / "cache" / "v1"

    def partial_started() -> bool:
        return any(p.is_file() for p in (tmp_path / "cache").glob(".v1.partial-*/*"))

    child = _spawn("download", target, dest)
    killed = _kill_when(child, partial_started)
    if killed:
        assert not dest.exists()
    # a fresh download next to the crashed one's leftovers succeeds and verifies
    if not dest.exists():
        ckpts.download(1, dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        ["manifest.json"] + [f"shard-{i}.bin" for i in range(FILES)]
    )
    assert (dest / "shard-3.bin").read_bytes() == (src / "shard-3.bin").read_bytes()
