"""An explorer's end of the weight-sync group as a process of its own, for the tests.

`python -m tests.unit.weight_group_peer ADDRESS TIMEOUT_S ID [SYNC_METHOD]` joins the group
(with the transport of SYNC_METHOD, nccl if not given) and prints one line per version it
receives whole: `got VERSION TOKEN SHA256` (the sha256 of the tensors' bytes in
the layout's order), until its stdin closes; a line `leave` on stdin closes the member (it prints
`left`) while the process goes on.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time

import torch

from rft.synchronizer.weight_group import WeightGroupMember


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
    member = WeightGroupMember(address, timeout_s, member_id, sync_method=sync_method)
    closed = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "leave":  # the explorer closes its end; the process lives on
                member.close()
                print("left", flush=True)
        closed.set()

    threading.Thread(target=commands, daemon=True).start()
    print("joining", flush=True)
    while not closed.is_set():
        received = member.take()
        if received is not None:
            print(f"got {received.version} {received.token} {digest(received.tensors)}", flush=True)
        time.sleep(0.02)
    member.close()


if __name__ == "__main__":
    main()
