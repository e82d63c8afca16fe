"""Shader-style dispatch: encoder -> pass -> dispatch, with bindings, push
constants and indirect dispatch, for kernels from shader-style toolchains.

Parameter convention
====================

A kernel dispatched through :class:`Dispatch` receives, in this order:

1. one group per binding, sorted by ``(space, index)``:

   * ``kind="storage"``: two parameters, the device pointer and the byte
     length as ``unsigned long long`` (u64);
   * ``kind="uniform"``: one parameter, the device pointer;

2. the push constants (:meth:`Dispatch.set_push_constants`), packed into u64
   words, one parameter per word, the last one zero-padded;

3. always, a trailing ``(const unsigned int* indirect, unsigned long long
   indirect_len)`` pair: ``(0, 0)`` for a direct dispatch, ``(pointer, 3)``
   for an indirect one, where ``indirect[0..2]`` are the workgroup counts in
   x, y, z.

CUDA has no device-side indirect launch, so an indirect dispatch launches a
fixed number of resident blocks (multiprocessor count x 16 by default;
``PYCUDADRV_PERSISTENT_BLOCKS`` or ``persistent_blocks=`` overrides it) and
the kernel loops over the virtual workgroups. With
``PYCUDADRV_INDIRECT_SYNC=1`` (a debug mode) the three counts are read back
to the host and the exact grid is launched as a direct dispatch instead.
A kernel written to this convention handles both::

    extern "C" __global__ void k(float* out, unsigned long long out_len,
                                 const float* in, unsigned long long in_len,
                                 unsigned long long pc0,
                                 const unsigned int* indirect, unsigned long long indirect_len) {
        unsigned gx = indirect_len ? indirect[0] : gridDim.x;
        unsigned gy = indirect_len ? indirect[1] : gridDim.y;
        unsigned gz = indirect_len ? indirect[2] : gridDim.z;
        unsigned long long groups = (unsigned long long)gx * gy * gz;
        unsigned long long first = indirect_len ? blockIdx.x
            : blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
        unsigned long long stride = indirect_len ? gridDim.x : groups;
        for (unsigned long long wg = first; wg < groups; wg += stride) {
            unsigned wx = wg % gx, wy = (wg / gx) % gy, wz = wg / ((unsigned long long)gx * gy);
            // ... the workgroup (wx, wy, wz), thread threadIdx ...
        }
    }
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pycudadrv._memory import Buffer

if TYPE_CHECKING:
    from pycudadrv._device import Device
    from pycudadrv._launch import Function
    from pycudadrv._stream import Event, Stream
    from pycudadrv.timestamps import Timestamps

__all__ = ["Encoder", "Pass", "Dispatch", "encoder"]

_KINDS = ("storage", "uniform")


def _dims(v, what):
    if v is None:
        return None
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    v = tuple(int(x) for x in v)
    if not 1 <= len(v) <= 3 or any(x < 0 for x in v):
        raise ValueError(f"{what} must be 1 to 3 non-negative ints, got {v!r}")
    return v + (1,) * (3 - len(v))


class Dispatch:
    """A kernel plus its bindings and push constants; :meth:`dispatch` launches it.

    Made by :meth:`Pass.dispatch`. The launch goes through a prepared launch
    cached per grid, so an unchanged dispatch re-marshals nothing.
    """

    def __init__(self, pass_: Pass, function: Function, block: int | tuple[int, ...] = (64, 1, 1),
                 persistent_blocks: int | None = None) -> None:
        self._pass = pass_
        self.function = function
        self.block = _dims(block, "block")
        self._bindings = {}
        self._push = ()
        self._prepared = {}
        self._by_grid = {}  # the grid as the caller passed it -> PreparedLaunch
        self.persistent_blocks = persistent_blocks

    # -- bindings ----------------------------------------------------------------------
    def set_arg(self, slot: tuple[int, int], buffer: Buffer, kind: Literal["storage", "uniform"] = "storage"
                ) -> Dispatch:
        """Bind ``buffer`` (a Buffer or a slice of one) at ``slot = (space, index)``.

        ``kind="storage"`` passes (pointer, byte length as u64); ``"uniform"``
        passes the pointer only. Raises TypeError for a non-Buffer and
        ValueError for a bad slot or kind."""
        if kind not in _KINDS:
            raise ValueError(f"binding kind must be 'storage' or 'uniform', got {kind!r}")
        if not isinstance(buffer, Buffer):
            raise TypeError(f"binding {slot!r}: expected a pycudadrv Buffer (or slice), got {type(buffer).__name__}")
        if (not isinstance(slot, tuple) or len(slot) != 2 or
                not all(isinstance(x, (int, np.integer)) and x >= 0 for x in slot)):
            raise ValueError(f"binding slot must be (space, index) of non-negative ints, got {slot!r}")
        self._bindings[(int(slot[0]), int(slot[1]))] = (buffer, kind)
        self._prepared.clear()
        self._by_grid.clear()
        return self

    def set_push_constants(self, data: Any) -> Dispatch:
        """Set the push constants: bytes or any array (its raw bytes), packed
        into u64 words, the last one zero-padded."""
        raw = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else np.ascontiguousarray(data).tobytes()
        raw += b"\0" * (-len(raw) % 8)
        self._push = tuple(np.frombuffer(raw, dtype=np.uint64)) if raw else ()
        self._prepared.clear()
        self._by_grid.clear()
        return self

    def arguments(self, indirect: Buffer | None = None) -> list[Any]:
        """The kernel arguments in convention order (see the module docstring)."""
        args = []
        for slot in sorted(self._bindings):
            buf, kind = self._bindings[slot]
            args.append(buf)
            if kind == "storage":
                args.append(np.uint64(buf.nbytes))
        args.extend(self._push)
        if indirect is None:
            args += [None, np.uint64(0)]
        else:
            args += [indirect, np.uint64(3)]
        return args

    # -- launching ---------------------------------------------------------------------
    def _launch(self, grid, indirect):
        key = (grid, indirect is not None, None if indirect is None else indirect.ptr)
        p = self._prepared.get(key)
        if p is None:
            p = self.function.bind(grid, self.block, *self.arguments(indirect), stream=self._pass.encoder.stream)
            self._prepared[key] = p
        p.launch()

    def dispatch(self, grid: int | tuple[int, ...] | None = None, *, threads: int | tuple[int, ...] | None = None,
                 indirect: Buffer | None = None) -> None:
        """Launch. Exactly one of:

        * ``grid=(x, y, z)`` workgroups (blocks);
        * ``threads=(x, y, z)``: the grid is the ceiling of threads / block;
        * ``indirect=buffer``: three u32 workgroup counts on the device.

        A zero-size grid or an empty indirect buffer is a no-op. Raises
        ValueError when none or several are given, or the indirect buffer is
        not 0 or at least 12 bytes."""
        if threads is None and indirect is None:
            # Fast path: a grid seen before (as the same hashable value) -> its prepared launch.
            try:
                p = self._by_grid.get(grid)
            except TypeError:  # unhashable (a list): take the slow path
                p = None
            if p is not None:
                p.launch()
                return
        if sum(x is not None for x in (grid, threads, indirect)) != 1:
            raise ValueError("give exactly one of grid=, threads= or indirect=")
        if indirect is not None:
            if not isinstance(indirect, Buffer):
                raise TypeError(f"indirect must be a Buffer of three u32, got {type(indirect).__name__}")
            if indirect.nbytes == 0:
                return
            if indirect.nbytes < 12:
                raise ValueError(f"indirect buffer must hold three u32 counts (12 bytes), has {indirect.nbytes}")
            if os.environ.get("PYCUDADRV_INDIRECT_SYNC", "").strip().lower() not in ("", "0", "false", "no", "off"):
                raw = indirect.read(nbytes=12, stream=self._pass.encoder.stream)
                counts = np.frombuffer(raw.tobytes(), dtype=np.uint32)
                g = tuple(int(c) for c in counts)
                if 0 in g:
                    return
                self._launch(g, None)
                return
            n = self.persistent_blocks or int(os.environ.get("PYCUDADRV_PERSISTENT_BLOCKS", 0)) or \
                self.function.device.multiprocessor_count * 16
            self._launch((int(n), 1, 1), indirect)
            return
        if threads is not None:
            t = _dims(threads, "threads")
            g = tuple(-(-t[k] // self.block[k]) for k in range(3))
        else:
            g = _dims(grid, "grid")
        if 0 in g:
            return
        self._launch(g, None)
        if threads is None:
            self._by_grid[grid] = self._prepared[(g, False, None)]

    launch = dispatch

    def __repr__(self) -> str:
        return (f"<Dispatch '{self.function.name}' block={self.block} {len(self._bindings)} binding(s), "
                f"{len(self._push)} push word(s)>")


class Pass:
    """A labelled group of dispatches (optionally timed by a Timestamps)."""

    def __init__(self, encoder: Encoder, label: str) -> None:
        self.encoder = encoder
        self.label = label

    def dispatch(self, function: Function, *, block: int | tuple[int, ...] = (64, 1, 1),
                 persistent_blocks: int | None = None) -> Dispatch:
        """A :class:`Dispatch` of ``function`` with workgroup size ``block``."""
        return Dispatch(self, function, block, persistent_blocks)


class Encoder:
    """Records passes of dispatches and copies onto one stream.

    Launches go on the stream as they are made; :meth:`submit` exists for
    symmetry with shader APIs and returns an Event recorded after them.
    """

    def __init__(self, device: Device | None = None, stream: Stream | None = None) -> None:
        from pycudadrv._device import get_current_device

        self.device = device if device is not None else get_current_device()
        self.stream = stream if stream is not None else self.device.default_stream

    @contextmanager
    def pass_(self, label: str = "pass", timestamps: Timestamps | None = None) -> Iterator[Pass]:
        """``with encoder.pass_("label", timestamps=ts) as p:``; with
        ``timestamps`` the pass is timed as ``ts.measure(label)``."""
        p = Pass(self, label)
        if timestamps is None:
            yield p
        else:
            with timestamps.measure(label):
                yield p

    def copy_buffer_to_buffer(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        """Device-to-device copy on the encoder's stream (``cuMemcpyDtoDAsync``);
        ranges are checked (ValueError)."""
        src.copy_to(dst, nbytes=nbytes, src_offset=src_offset, dst_offset=dst_offset, stream=self.stream)

    def submit(self) -> Event:
        """Return an Event recorded after everything encoded so far."""
        from pycudadrv._stream import Event

        return Event(timing=False, device=self.device).record(self.stream)


def encoder(device: Device | None = None, stream: Stream | None = None) -> Encoder:
    """``Encoder(device, stream)``; also reachable as ``Device.encoder(stream)``."""
    return Encoder(device, stream)
