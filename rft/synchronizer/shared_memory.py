"""The `memory` transport: the trainer shares each version's memory with members on its host.

For every version the trainer copies the tensors, in the layout's order, into one buffer on its
own device that it shares (the last version's again once every member acknowledged that one, else
a fresh one): on a GPU by CUDA IPC (torch's `reduce_tensor` gives the handle, one per member
because each handle carries its own reference count), on the CPU as a file in /dev/shm that
members map. It posts the handles in the version's message; each member opens its handle, copies
the version into fresh tensors on its own device, lets go of the view, and acknowledges through
the rendezvous store ("ok", or why not). NCCL cannot put two ranks on one GPU; this path can, and
on one host it moves each byte once on each side.

The trainer waits for every member's acknowledgement up to the group's timeout and keeps the
buffer until then; a member that did not acknowledge is dropped from the group (the control
plane forms the next generation without it, and it joins again), so a dead or hung member costs
one timeout, once. A buffer is written again only after every member it was posted to said it
has copied it out; otherwise it is let go of, which is safe for a member still reading: on the
CPU the file is unlinked, and a mapping made before stays valid while one opened after fails
(that version is dropped); on a GPU torch keeps an IPC block alive while a member holds a view
of it. It owns the buffer layout (256-byte aligned offsets), the handles' encoding (JSON, never
pickled objects) and the acknowledgements.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import inspect
import itertools
import json
import logging
import os
import secrets
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

from rft.errors import ConfigError
from rft.synchronizer.broadcast import settle
from rft.synchronizer.transport import Generation, Layout, Post

log = logging.getLogger(__name__)

# offsets in a version's buffer: any dtype's view of the buffer lines up
_ALIGN = 256
# how often the trainer looks for the members' acknowledgements
_ACK_POLL_S = 0.005
_OK = b"ok"
_PREFIX = "rft-weights-"
_shares = itertools.count(1)


def _left(member: str) -> str:
    return f"left/{member}"


def _host_identity() -> str:
    """What two processes that can share memory have in common: the host name and its boot."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()}/{boot.read_text().strip() if boot.exists() else ''}"


def _file_prefix() -> str:
    # the host in the name: containers that share /dev/shm but not their process ids never
    # take each other's live trainer for a dead one
    return f"{_PREFIX}{hashlib.sha256(_host_identity().encode()).hexdigest()[:8]}-"


def _places(layout: Layout) -> tuple[list[tuple[int, int]], int]:
    """Each tensor's (offset, bytes) in the version's buffer, and the buffer's size."""
    places, end = [], 0
    for shape, dtype in zip(layout.shapes, layout.torch_dtypes(), strict=True):
        start = -(-end // _ALIGN) * _ALIGN
        size = torch.Size(shape).numel() * dtype.itemsize
        places.append((start, size))
        end = start + size
    return places, max(end, 1)


def _views(flat: torch.Tensor, layout: Layout) -> dict[str, torch.Tensor]:
    """The layout's tensors as views of the version's buffer."""
    places, _ = _places(layout)
    return {
        name: flat[start : start + size].view(dtype).view(shape)
        for name, shape, dtype, (start, size) in zip(
            layout.names, layout.shapes, layout.torch_dtypes(), places, strict=True
        )
    }


class _Buffer(Protocol):
    tensor: torch.Tensor

    def handle_for(self, member: str) -> str: ...

    def release(self) -> None: ...


class _Share(Protocol):
    """How buffers on one kind of device are shared between two unrelated processes."""

    def allocate(self, nbytes: int, device: torch.device) -> _Buffer: ...

    def open(self, handle: str, nbytes: int) -> torch.Tensor: ...


class _FileBuffer:
    def __init__(self, path: Path, nbytes: int) -> None:
        self.path = path
        self.tensor = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)

    def handle_for(self, member: str) -> str:
        return str(self.path)

    def release(self) -> None:
        # mappings members made stay valid; the pages go with the last of them
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class _FileShare:
    """CPU: a file in /dev/shm (memory, not disk), mapped by the trainer and each member."""

    def __init__(self) -> None:
        shm = Path("/dev/shm")
        self.folder = shm if shm.is_dir() else Path(tempfile.gettempdir())
        self._sweep()

    def _sweep(self) -> None:
        """Remove the buffers of trainers that died before they let go of them."""
        prefix = _file_prefix()
        for path in self.folder.glob(f"{prefix}*"):
            pid = path.name.removeprefix(prefix).split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    path.unlink()

    def allocate(self, nbytes: int, device: torch.device) -> _Buffer:
        name = f"{_file_prefix()}{os.getpid()}-{next(_shares)}-{secrets.token_hex(4)}"
        return _FileBuffer(self.folder / name, nbytes)

    def open(self, handle: str, nbytes: int) -> torch.Tensor:
        path = Path(handle)
        if path.parent != self.folder or not path.name.startswith(_PREFIX):
            raise RuntimeError(f"{handle} is not a weight buffer of this host")
        # private: this side only reads, and never writes into the trainer's file
        return torch.from_file(handle, shared=False, size=nbytes, dtype=torch.uint8)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# what torch's rebuild_cuda_tensor takes beside the fields of the handle itself: the buffer is
# always one flat uint8 tensor, so these are known on both sides and never travel
_CUDA_FIXED = {
    "tensor_cls": torch.Tensor,
    "tensor_stride": (1,),
    "storage_cls": torch.storage.TypedStorage,
    "dtype": torch.uint8,
    "requires_grad": False,
}
_CUDA_PARAMS = tuple(inspect.signature(rebuild_cuda_tensor).parameters)


def _device_uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


class _CudaBuffer:
    def __init__(self, nbytes: int, device: torch.device) -> None:
        self.tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
        self.uuid = _device_uuid(self.tensor.device.index)

    def handle_for(self, member: str) -> str:
        # one reduce per member: each handle holds one reference the member gives back
        rebuild, args = reduce_tensor(self.tensor)
        fields = dict(zip(_CUDA_PARAMS, args, strict=True))
        if rebuild is not rebuild_cuda_tensor or fields["storage_cls"] not in (
            torch.storage.TypedStorage,
            torch.UntypedStorage,
        ):
            raise RuntimeError("this torch shares CUDA tensors in a way rft does not know")
        sent: dict[str, Any] = {"uuid": self.uuid, "size": list(fields["tensor_size"])}
        for key in (
            "tensor_offset",
            "storage_handle",
            "storage_size_bytes",
            "storage_offset_bytes",
            "ref_counter_handle",
            "ref_counter_offset",
            "event_handle",
            "event_sync_required",
        ):
            value = fields[key]
            if isinstance(value, bytes):
                value = {"b64": base64.b64encode(value).decode()}
            sent[key] = value
        return json.dumps(sent)

    def release(self) -> None:
        # torch keeps the block while a member holds a view of it (its IPC reference count)
        self.tensor = torch.empty(0, dtype=torch.uint8)
        torch.cuda.ipc_collect()


class _CudaShare:
    """A GPU: CUDA IPC, on the same physical GPU or another one of the host."""

    def allocate(self, nbytes: int, device: torch.device) -> _Buffer:
        return _CudaBuffer(nbytes, device)

    def open(self, handle: str, nbytes: int) -> torch.Tensor:
        sent = json.loads(handle)
        uuid = sent.pop("uuid")
        # the trainer's index of its GPU need not be ours (CUDA_VISIBLE_DEVICES differ)
        local = [i for i in range(torch.cuda.device_count()) if _device_uuid(i) == uuid]
        if not local:
            raise RuntimeError(f"the trainer's GPU {uuid} is not visible to this process")
        fields = {
            key: base64.b64decode(value["b64"]) if isinstance(value, dict) else value
            for key, value in sent.items()
        }
        fields["tensor_size"] = torch.Size(fields.pop("size"))
        fields["storage_device"] = local[0]
        flat: torch.Tensor = rebuild_cuda_tensor(**fields, **_CUDA_FIXED)
        if flat.numel() != nbytes:
            raise RuntimeError(f"a shared buffer of {flat.numel()} bytes, expected {nbytes}")
        return flat


_SHARES: dict[str, type[_FileShare] | type[_CudaShare]] = {"cpu": _FileShare, "cuda": _CudaShare}


def _share_for(kind: str) -> _FileShare | _CudaShare:
    try:
        return _SHARES[kind]()
    except KeyError:
        raise ConfigError(
            f"synchronizer.sync_method: memory shares weights on {', '.join(_SHARES)} devices, "
            f"not {kind}"
        ) from None


class SharedMemoryTransport:
    """`sync_method: memory`."""

    def describe(self, device: torch.device) -> dict[str, Any]:
        _share_for(device.type)  # an unknown device is refused when the trainer starts
        return {"host": _host_identity(), "shares": device.type}

    def refuses(self, described: dict[str, Any], device: torch.device) -> str | None:
        if described["host"] != _host_identity():
            return "sync_method memory shares memory on the trainer's host, and this is another"
        if described["shares"] not in _SHARES:
            return f"the trainer shares {described['shares']} memory, which rft cannot open"
        return None

    def sender(self, generation: Generation) -> _Sender:
        return _Sender(generation, _share_for(generation.described["shares"]))

    def receiver(self, generation: Generation, member_id: str) -> _Receiver:
        g = generation
        return _Receiver(g.store, member_id, _share_for(g.described["shares"]), g.device)


class _Sender:
    def __init__(self, generation: Generation, share: _FileShare | _CudaShare) -> None:
        self.store, self.members, self.share = generation.store, generation.members, share
        self.device, self.timeout = generation.device, generation.timeout
        self._versions = 0
        # the last version's buffer, once every member has acknowledged it: no member reads it
        # any more, so the next version of the same size is written into it. A fresh 513 MiB
        # file in /dev/shm cost the CPU trainer about 0.4 s of page faults per version.
        self._kept: _Buffer | None = None

    def deliver(self, post: Post, tensors: dict[str, torch.Tensor], layout: Layout) -> list[str]:
        _, nbytes = _places(layout)
        buffer = self._buffer(nbytes)
        reached: list[str] = []
        try:
            for name, view in _views(buffer.tensor, layout).items():
                view.copy_(tensors[name])
            settle(self.device)  # written before any member can look
            self._versions += 1
            share = self._versions
            handles = {member: buffer.handle_for(member) for member in self.members}
            post({"share": share, "bytes": nbytes, "handles": handles})
            reached = self._acknowledged(share)
            return reached
        finally:
            if self.members and reached == self.members:
                self._kept = buffer
            else:
                # a member that did not acknowledge may still be reading it: never written again
                buffer.release()

    def _buffer(self, nbytes: int) -> _Buffer:
        kept, self._kept = self._kept, None
        if kept is not None and kept.tensor.numel() == nbytes:
            return kept
        if kept is not None:
            kept.release()
        return self.share.allocate(nbytes, self.device)

    def _acknowledged(self, share: int) -> list[str]:
        """The members that acknowledged version `share` whole within the timeout; the buffer
        is kept until then."""
        deadline = time.monotonic() + self.timeout.total_seconds()
        waiting = {member: f"ack/{share}/{member}" for member in self.members}
        reached = []
        while waiting:
            for member, key in list(waiting.items()):
                if self.store.check([key]):
                    answer = self.store.get(key)
                    if answer == _OK:
                        reached.append(member)
                    else:
                        log.warning("explorer %s: %s", member, answer.decode(errors="replace"))
                    del waiting[member]
                elif self.store.check([_left(member)]):
                    del waiting[member]  # its explorer ended: no acknowledgement will come
            if waiting and time.monotonic() > deadline:
                break
            if waiting:
                time.sleep(_ACK_POLL_S)
        return [m for m in self.members if m in reached]

    def close(self) -> None:
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.release()


class _Receiver:
    def __init__(
        self, store: Any, member_id: str, share: _FileShare | _CudaShare, device: torch.device
    ) -> None:
        self.store, self.member_id, self.share, self.device = store, member_id, share, device

    def receive(self, body: dict[str, Any], layout: Layout) -> dict[str, torch.Tensor]:
        ack = f"ack/{body['share']}/{self.member_id}"
        try:
            tensors = self._copy(body, layout)
        except (RuntimeError, OSError, KeyError) as exc:
            # said at once, so the trainer does not wait out its timeout for this member
            self.store.set(ack, f"could not read weight version {body.get('version')}: {exc}")
            raise RuntimeError(f"could not read the shared weights: {exc}") from exc
        self.store.set(ack, _OK)
        return tensors

    def leave(self) -> None:
        self.store.set(_left(self.member_id), "1")

    def _copy(self, body: dict[str, Any], layout: Layout) -> dict[str, torch.Tensor]:
        """The version in tensors of this member's own; the trainer's buffer, and every view of
        it, is let go of on return (on a GPU that gives the block's reference back)."""
        flat = self.share.open(body["handles"][self.member_id], int(body["bytes"]))
        tensors = layout.empty(self.device)
        for name, view in _views(flat, layout).items():
            tensors[name].copy_(view)
        settle(self.device)
        settle(flat.device)
        return tensors
