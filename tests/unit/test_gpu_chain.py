"""infra/gpu/measure.sh's `chain` and `chain-tail`, run here with a stand-in for the GPU machine's
env.sh: a chain's stages outlive the call that starts them, and `chain-tail` brings back every
file they wrote plus the chain's own text in one archive, because a device call returns at most
8 files and one `scale-loop` stage alone leaves 5 or more."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _measure(home: Path, out: Path, *args: str, **env: str) -> str:
    run_env = {**os.environ, "RFT_GPU_HOME": str(home), "OUT": str(out), "PYTHONPATH": "", **env}
    done = subprocess.run(
        ["bash", "infra/gpu/measure.sh", *args],
        cwd=ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_chain_tail_packs_every_file_and_the_chain_text(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    (home / "chain-out").mkdir(parents=True)
    (home / "env.sh").write_text(":\n")
    for i in range(11):  # more than a call's 8 files
        (home / "chain-out" / f"run-{i}.txt").write_text(f"file {i}\n")
    (home / "chain.txt").write_text("== stage: x\nversion 3 taken in 0.1s\n== chain done\n")

    shown = _measure(home, out, "chain-tail", LINES="1")

    assert shown == "== chain done\n"
    assert sorted(p.name for p in out.iterdir()) == ["chain-out.tar.gz"]
    with tarfile.open(out / "chain-out.tar.gz") as archive:
        names = {m.name for m in archive.getmembers() if m.isfile()}
        text = archive.extractfile("chain.txt")
        assert text is not None and b"version 3 taken in" in text.read()
    assert names == {"chain.txt"} | {f"chain-out/run-{i}.txt" for i in range(11)}


def test_a_chain_runs_its_stages_in_order_after_the_call_returns(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    (home / "env.sh").write_text(":\n")
    # stages measure.sh does not know exit 2 at once: the second still runs after the first,
    # each with its exit status, the argument with a space kept whole
    started = _measure(home, out, "chain", "nosuchstage", "a b", "+", "nosuchstage2")
    assert "2 stages" in started
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline:
        text = (home / "chain.txt").read_text() if (home / "chain.txt").exists() else ""
        if "== chain done" in text:
            break
        time.sleep(0.2)
    lines = [line for line in text.splitlines() if line.startswith("==")]
    assert "stage: nosuchstage a\\ b" in lines[0]
    assert lines[1] == "== stage rc=2"
    assert "stage: nosuchstage2" in lines[2]
    assert lines[-1] == "== chain done"
