"""Shared-memory blocks: how the process pool publishes an object once for all its workers.

A block holds an object's pickle (protocol 5) and, beside it, every contiguous
numpy array the object holds (its out-of-band buffers, 64-byte aligned), so a
worker unpickles the object over the block and its arrays are views of it, not
copies. An array that already lies in a block the driver holds a view of (the
arrays :meth:`ProcessExecutor.share <helm_plan.exec.local.ProcessExecutor.share>`
handed out, pinned for the pool's life) is not copied again: its span names
that block, and a worker maps it beside the object's own. An object built
from a shared trace (a scaled copy that keeps the trace's token arrays, a
load-curve setup over the shared arrays) so ships only what is new in it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import shutil
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from helm_plan import io
from helm_plan.exec.base import ExecutorError

Span = tuple[str, int, int]
"""Where one array buffer lies: (block name, "" for the object's own block, or the path of a
spill file (:func:`helm_plan.io.spill_array`); offset; bytes)."""
Ref = tuple[int, str, int, tuple[Span, ...]]
"""A published object: (token, its own block's name, pickle size, its array buffers' spans)."""
Mapping = tuple[int, int, str]
"""A driver view's own mapping of a block: (address, size, block name)."""

ALIGN = 64
"""Alignment of each array buffer in a block (numba types unaligned arrays apart)."""
SHM_DIR = "/dev/shm"
"""Where POSIX shared memory lives on Linux (a tmpfs: 64 MiB in a default Docker container)."""


def shm_free() -> int | None:
    """Free bytes in shared memory, or None where it is not a directory we can see."""
    try:
        return shutil.disk_usage(SHM_DIR).free
    except OSError:
        return None


def check_room(need: int) -> None:
    """Refuse a block bigger than the room left in shared memory."""
    # Linux grows a block lazily: a block larger than the tmpfs's free room is created
    # without error, and the first write past the room kills this process with SIGBUS
    free = shm_free()
    if free is not None and need > free:
        raise ExecutorError(
            f"the workers' shared inputs need {need / 2**20:,.0f} MiB of shared memory but "
            f"{SHM_DIR} has {free / 2**20:,.0f} MiB free",
            hint="run with --workers 1, or give the machine more shared memory "
            "(docker run --shm-size=8g)",
        )


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _address(m: memoryview) -> int:
    return int(np.frombuffer(m, np.uint8).ctypes.data) if m.nbytes else 0


def pack(obj: Any, token: int, mappings: list[Mapping]) -> tuple[Ref, shared_memory.SharedMemory]:
    """Publish ``obj`` into a new block; buffers inside ``mappings`` are referenced, not copied."""
    # protocol 5 hands every contiguous numpy array over as a buffer (no pickled copy of
    # the trace in this process); each new one lands once in the block, after the pickle
    bufs: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    # a spilled array: its file, by the path of a mapping alive now (first: a view's mapping
    # is also in ``mappings``, under the name it was mapped by, which may have closed)
    mappings = [*io.spill_mappings(), *mappings]
    spans: list[Span] = []
    end = _aligned(len(data))
    for m in raws:
        a = _address(m)
        home = next((mp for mp in mappings if mp[0] <= a and a + m.nbytes <= mp[0] + mp[1]), None)
        if home is not None and m.nbytes:
            spans.append((home[2], a - home[0], m.nbytes))  # already in a shared block
        else:
            spans.append(("", end, m.nbytes))
            end = _aligned(end + m.nbytes)
    check_room(end)
    block = shared_memory.SharedMemory(create=True, size=max(end, 1))
    block.buf[: len(data)] = data
    for m, (src, o, n) in zip(raws, spans, strict=True):
        if not src:
            block.buf[o : o + n] = m
    del raws
    for b in bufs:
        b.release()
    return (token, block.name, len(data), tuple(spans)), block


_SHARED: dict[int, tuple[Any, list[shared_memory.SharedMemory]]] = {}
"""A worker's unpickled shared objects and the blocks they map, by token (the newest
``keep``)."""
_RETIRED: list[shared_memory.SharedMemory] = []
"""A worker's blocks whose objects were evicted but whose arrays may still be referenced."""


def load(ref: Ref, keep: int) -> Any:
    """The object behind ``ref``, unpickled once per worker over its blocks (kept: ``keep``).

    Its numpy arrays are views of the blocks (pickle protocol 5's out-of-band buffers), not
    copies: every worker reads the one copy the driver published. The blocks stay mapped
    while the object is cached, and until nothing references their arrays any more.
    """
    token, name, size, spans = ref
    if token not in _SHARED:
        blocks: dict[str, Any] = {"": _attach(name)}
        for src, _, _ in spans:
            if src not in blocks:
                blocks[src] = _attach(src)
        own = blocks[""].buf
        obj = pickle.loads(own[:size], buffers=[blocks[s].buf[o : o + n] for s, o, n in spans])
        _SHARED[token] = obj, list(blocks.values())
        while len(_SHARED) > keep:
            _RETIRED.extend(_SHARED.pop(next(iter(_SHARED)))[1])
        for old in list(_RETIRED):
            with contextlib.suppress(BufferError):  # an array of it still lives: keep it mapped
                old.close()
                _RETIRED.remove(old)
    return _SHARED[token][0]


def _is_spill(src: str) -> bool:
    return src.startswith("/")  # a block's name never is a path


class _Mapped:
    """A block or spill file a worker maps, closed as a ``SharedMemory`` is."""

    def __init__(self, mm: mmap.mmap) -> None:
        self._mm = mm
        self.buf = memoryview(mm)

    def close(self) -> None:
        self.buf.release()  # BufferError while an array over it lives, as SharedMemory's
        self._mm.close()


def _attach(name: str) -> _Mapped | shared_memory.SharedMemory:
    # a plain mapping where the block has a path: a SharedMemory whose arrays outlive it (a
    # worker's cached objects at exit) prints "Exception ignored ... BufferError" from __del__
    mm = _map_path(name)
    return shared_memory.SharedMemory(name=name) if mm is None else _Mapped(mm)


def _map_path(name: str) -> mmap.mmap | None:
    if _is_spill(name):
        return io.map_spill(name)
    try:
        fd = os.open(os.path.join(SHM_DIR, name.lstrip("/")), os.O_RDWR)
    except OSError:
        return None
    try:
        return mmap.mmap(fd, 0)
    finally:
        os.close(fd)


def driver_view(ref: Ref) -> tuple[Any, list[Mapping]] | None:
    """The object behind ``ref`` over the driver's own mappings of its blocks, and those
    mappings; None where a block has no path to map (not Linux's ``/dev/shm``).

    Its own mapping, not the publishing ``SharedMemory``'s: the executor unmaps and unlinks
    its blocks when it closes, while the caller's arrays may live on; an unlinked block's
    pages stay until the last mapping (and so the last array) goes.
    """
    _, name, size, spans = ref
    maps = {"": _map_path(name)}
    for src, _, _ in spans:
        if src not in maps:
            maps[src] = _map_path(src)
    if any(m is None for m in maps.values()):
        return None
    views = {k: memoryview(m) for k, m in maps.items()}
    obj = pickle.loads(views[""][:size], buffers=[views[s][o : o + n] for s, o, n in spans])
    # a spill is named by this mapping's own path (io.map_spill), not the one it was opened by
    paths = {a: p for a, _, p in io.spill_mappings()}
    return obj, [
        (a := _address(v), v.nbytes, paths[a] if _is_spill(k) else k or name)
        for k, v in views.items()
    ]


__all__ = ["Ref", "check_room", "driver_view", "load", "pack", "shm_free"]
