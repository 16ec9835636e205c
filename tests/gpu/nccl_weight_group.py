"""The `nccl` weight-sync group's failure paths on real NCCL: a check for a host with two GPUs.

`python -m tests.gpu.nccl_weight_group` (infra/gpu/measure.sh nccl-group). Gloo's side of the same
paths runs in `make test` (tests/unit/test_weight_group.py); NCCL differs where it matters: a
broadcast's wait returns before the data moved, and torch's default on a timed-out collective
ends the whole process. The trainer's end runs here on cuda:0, explorers' ends
(tests.unit.weight_group_peer processes) on cuda:1, in turn:

1. a member joins and receives versions of SmolLM2's size (257 MiB of bf16) whole; the send
   times are printed;
2. the member is stopped (SIGSTOP): the next send gives up within the timeout, this process lives
   on, and the version after forms no group and costs no wait;
3. the stopped member is killed and a new one joins on the same GPU: a fresh communicator after
   the aborted one carries versions whole;
4. that member closes its end while its process lives: the next send costs no wait;
5. a member killed mid-group (SIGKILL): the send gives up within the timeout;
6. a member that answers a new generation and then hangs before making its end: the first
   broadcast's communicator setup (non-blocking) gives up within the timeout.

Prints one line per step and `CHECK nccl-group: passed`, or the failed step and exit 1; a step
that stalls past STALL_S prints every thread's stack and ends the check.
`python -m tests.gpu.nccl_weight_group cpu` runs the same steps over gloo on the CPU.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import statistics
import sys
import time

import torch

from rft.engines.fsdp_ranks import free_port
from rft.synchronizer.weight_group import WeightGroupHost
from tests.unit.weight_group_peer import Peer, digest, send_until

TIMEOUT_S = 10.0
SLACK_S = 5.0
# a step that takes longer has hung: every thread's stack is printed, then the check ends
STALL_S = 150.0


def version(number: int, mib: int = 257) -> dict[str, torch.Tensor]:
    """bf16 tensors of about `mib` MiB in SmolLM2's rough proportions, different per version."""
    g = torch.Generator().manual_seed(number)
    elements = mib * 2**19  # 2 bytes each
    embed = elements // 4
    layer = (elements - embed) // 30
    tensors = {"model.embed_tokens.weight": torch.randn(embed // 576, 576, generator=g)}
    for k in range(30):
        tensors[f"model.layers.{k}.mlp.up_proj.weight"] = torch.randn(
            layer // 576, 576, generator=g
        )
    return {name: t.to(torch.bfloat16) for name, t in tensors.items()}


def step(label: str, ok: bool, detail: str) -> None:
    print(f"{'ok' if ok else 'FAILED'}: {label}: {detail}", flush=True)
    if not ok:
        print("CHECK nccl-group: FAILED", flush=True)
        sys.exit(1)
    faulthandler.dump_traceback_later(STALL_S, exit=True)  # the next step's budget


def timed_send(
    host: WeightGroupHost, number: int, token: int, mib: int = 257
) -> tuple[list[str], float]:
    """Send version `number` (its tensors made before the clock starts); the members it
    reached and the seconds the send took."""
    tensors = version(number, mib)
    started = time.monotonic()
    reached = host.send(number, token, tensors)
    return reached, time.monotonic() - started


def main() -> None:
    # `cpu` as the argument runs the same steps over gloo: a dry run of the check itself
    trainer, explorer = ("cpu", "cpu") if sys.argv[1:] == ["cpu"] else ("cuda:0", "cuda:1")
    if trainer != "cpu" and torch.cuda.device_count() < 2:
        raise SystemExit("needs two GPUs (NCCL puts no two ranks on one GPU)")
    faulthandler.dump_traceback_later(STALL_S, exit=True)
    host = WeightGroupHost(f"127.0.0.1:{free_port()}", TIMEOUT_S, device=trainer)
    address = f"127.0.0.1:{host.port}"

    def peer(member: str) -> Peer:
        return Peer(address, member, "nccl", TIMEOUT_S, device=explorer)

    a = peer("a")
    joined, _ = send_until(host, {"a"}, 1)
    times = []
    for v in range(joined + 1, joined + 6):
        sent = version(v)
        started = time.monotonic()
        reached = host.send(v, 100 + v, sent)
        times.append(time.monotonic() - started)
        step(f"v{v} sent", reached == ["a"], f"reached {reached}")
        step(f"v{v} received", a.expect(v) == (100 + v, digest(sent)), "sha256 equal")
    print(
        f"send, 257 MiB bf16 {trainer} -> {explorer}: median {statistics.median(times):.3f} s "
        f"({', '.join(f'{t:.3f}' for t in times)})",
        flush=True,
    )

    os.kill(a.proc.pid, signal.SIGSTOP)
    v = joined + 6
    reached, waited = timed_send(host, v, 1)
    step(
        "hung member",
        reached == [] and waited < TIMEOUT_S + SLACK_S,
        f"reached {reached} after {waited:.1f} s (timeout {TIMEOUT_S:.0f} s); this process lives",
    )
    reached, waited = timed_send(host, v + 1, 2)
    step("next version", reached == [] and waited < TIMEOUT_S / 2, f"no group, {waited:.2f} s")
    os.kill(a.proc.pid, signal.SIGKILL)
    a.stop()

    b = peer("b")
    rejoined, _ = send_until(host, {"b"}, v + 2)
    sent = version(rejoined + 1)
    reached = host.send(rejoined + 1, 3, sent)
    step(
        "after the abort",
        reached == ["b"] and b.expect(rejoined + 1) == (3, digest(sent)),
        f"a new member on {explorer} received v{rejoined + 1} whole over a fresh communicator",
    )
    b.leave()
    reached, waited = timed_send(host, rejoined + 2, 4)
    step(
        "member closed, process alive",
        reached == [] and waited < TIMEOUT_S / 2,
        f"reached {reached} after {waited:.2f} s",
    )
    b.stop()

    c = peer("c")
    joined_c, _ = send_until(host, {"c"}, rejoined + 3)
    step("another member", True, f"c joined at v{joined_c}")
    os.kill(c.proc.pid, signal.SIGKILL)
    c.stop()
    reached, waited = timed_send(host, joined_c + 1, 5)
    step(
        "killed member",
        reached == [] and waited < TIMEOUT_S + SLACK_S,
        f"reached {reached} after {waited:.1f} s",
    )

    d = peer("d")
    joined_d, _ = send_until(host, {"d"}, joined_c + 2)
    d.hang_after_answer()
    # new shapes: a new generation, which d answers and then never makes its end of
    reached, waited = timed_send(host, joined_d + 1, 6, mib=128)
    step(
        "member hung after answering",
        reached == [] and waited < TIMEOUT_S + SLACK_S,
        f"reached {reached} after {waited:.1f} s (the communicator's setup gave up)",
    )
    os.kill(d.proc.pid, signal.SIGKILL)
    d.stop()
    host.close()
    faulthandler.cancel_dump_traceback_later()
    print("CHECK nccl-group: passed", flush=True)


if __name__ == "__main__":
    main()
