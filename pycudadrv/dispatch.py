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

An indirect dispatch runs one of three ways:

* inside a graph capture (CUDA 12.4+ driver), GPU-driven: a one-thread
  pycudadrv kernel reads the three counts and sets the grid of the
  dispatch's kernel node on the device (``cudaGraphKernelNodeSetGridDim``, a
  device-updatable kernel node launched with the indirect pair): one block
  per workgroup (x*y*z of them, in x), or the device's grid limit in x when
  there are more, each block then taking several; no workgroup disables the
  node for that replay. No host read-back, and no count is too large to run.
  On sm_90+ the node is the update kernel's programmatic dependent (a PDL
  edge: it launches as soon as its grid is set), and the update kernel that
  of a kernel captured just before it; the dispatch's kernel needs no
  ``griddepcontrol.wait`` for it, as the update kernel reads the counts only
  once the work before it has finished;
* outside a capture (or where the driver cannot update nodes), persistent: a
  fixed number of resident blocks (multiprocessor count x 16 by default;
  ``PYCUDADRV_PERSISTENT_BLOCKS`` or ``persistent_blocks=`` overrides it) and
  the kernel loops over the virtual workgroups;
* with ``PYCUDADRV_INDIRECT_SYNC=1`` (a debug mode) the three counts are read
  back to the host and the exact grid is launched as a direct dispatch.

``PYCUDADRV_INDIRECT_TRACE=1`` prints the kernel of every indirect dispatch.
A kernel written to this convention handles all three::

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

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from pycudadrv import nvtx
from pycudadrv._env import env_flag, env_int
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, short_repr
from pycudadrv._kernel import dims3
from pycudadrv._memory import Buffer
from pycudadrv._sequence import DispatchBase
from pycudadrv._usage import INDIRECT_BIT, missing_usage
from pycudadrv._uninit import initialised, missing

if TYPE_CHECKING:  # for annotations only
    from pycudadrv._device import Device
    from pycudadrv._event import Event
    from pycudadrv._kernel import _Dims
    from pycudadrv._launch import Function
    from pycudadrv._stream import Stream
    from pycudadrv.timestamps import Timestamps

__all__ = ["Encoder", "Pass", "Dispatch", "encoder"]

_KINDS = ("storage", "uniform")
#: How an indirect dispatch runs: "auto" (GPU-driven inside a capture where the driver can, else
#: persistent), "device" (GPU-driven, or an error), "persistent" (always persistent blocks).
_INDIRECT_MODES = ("auto", "device", "persistent")


def _dims(v: Any, what: str) -> tuple[int, int, int] | None:
    return None if v is None else dims3(v, what, True)


def _persistent_blocks(fn: Any, override: int | None) -> int:
    if override:
        return int(override)
    n = env_int("PYCUDADRV_PERSISTENT_BLOCKS", None, minimum=1)   # an invalid value warns once
    return int(n) if n else fn.device.multiprocessor_count * 16


def _device_indirect_supported(stream: Any) -> bool:
    from pycudadrv._driver import driver_version

    return stream.capturing and driver_version() >= (12, 4)


class Dispatch(DispatchBase):
    """A kernel plus its bindings and push constants; :meth:`dispatch` launches it.

    Made by :meth:`Pass.dispatch`. The launch goes through a prepared launch
    cached per grid, so an unchanged dispatch re-marshals nothing; a grid seen
    before goes to it in C (:class:`pycudadrv._sequence.DispatchBase`).
    """

    def __init__(self, pass_: Pass, function: Function, block: _Dims = (64, 1, 1), persistent_blocks: int | None = None,
                 indirect_mode: str = "auto") -> None:
        if indirect_mode not in _INDIRECT_MODES:
            raise ArgumentValueError(f"indirect_mode must be one of {_INDIRECT_MODES}, got {indirect_mode!r}")
        if not isinstance(pass_, Pass):
            raise ArgumentTypeError(f"Dispatch: pass_ must be a Pass (encoder.pass_(label) gives one), got "
                                    f"{type(pass_).__name__} {short_repr(pass_)}")
        from pycudadrv._launch import Function as _Function

        if not isinstance(function, _Function):
            raise ArgumentTypeError(f"Dispatch: function must be a Function (module.function(name)), got "
                                    f"{type(function).__name__} {short_repr(function)}")
        self.indirect_mode = indirect_mode
        self._pass = pass_
        self.function = function
        self.block = _dims(block, "block")
        self._bindings: dict[tuple[int, int], tuple[Buffer, str]] = {}
        self._push: tuple = ()
        self._prepared: dict = {}
        self.persistent_blocks = persistent_blocks
        self._update_kernel: Function | None = None
        self._prepare_device_indirect()

    def _prepare_device_indirect(self) -> None:
        """Load the update kernel of GPU-driven indirect dispatch now, outside any
        capture (a module load has no place inside one). A failure here only
        defers the load (and its error) to the first indirect dispatch in a capture."""
        stream = self._pass.encoder.stream
        if stream.capturing:
            return
        try:
            from pycudadrv._driver import driver_version

            if driver_version() >= (12, 4):
                self._indirect_update_kernel()
        except Exception:  # noqa: BLE001 -- see the docstring
            pass

    def _indirect_update_kernel(self) -> Any:
        """pycudadrv's update kernel for GPU-driven indirect dispatch, loaded
        outside any capture (a module load has no place inside one)."""
        if self._update_kernel is None:
            from pycudadrv._loops import loop_kernel

            self._update_kernel = loop_kernel(self.function.device, "pycudadrv_indirect_update")
        return self._update_kernel

    # -- bindings ----------------------------------------------------------------------
    def set_arg(self, slot: tuple[int, int], buffer: Buffer, kind: str = "storage") -> Dispatch:
        """Bind ``buffer`` (a Buffer or a slice of one) at ``slot = (space, index)``.

        ``kind="storage"`` passes (pointer, byte length as u64); ``"uniform"``
        passes the pointer only. Raises ArgumentTypeError for a non-Buffer and
        ArgumentValueError for a bad slot or kind; nothing changes then."""
        if kind not in _KINDS:
            raise ArgumentValueError(f"binding kind must be 'storage' or 'uniform', got {kind!r}")
        if not isinstance(buffer, Buffer):
            raise ArgumentTypeError(f"binding {slot!r}: expected a pycudadrv Buffer (or slice), got "
                                    f"{type(buffer).__name__}")
        if (not isinstance(slot, tuple) or len(slot) != 2 or
                not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in slot)):
            raise ArgumentValueError(f"binding slot must be (space, index) of non-negative ints, got {slot!r}")
        if buffer.closed:
            buffer.ptr  # raises ClosedError naming why
        self._bindings[(int(slot[0]), int(slot[1]))] = (buffer, kind)
        self._prepared.clear()
        self._clear_grid_cache()
        return self

    def set_push_constants(self, data: Any) -> Dispatch:
        """Set the push constants: bytes or any array (its raw bytes), packed
        into u64 words, the last one zero-padded."""
        raw = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else np.ascontiguousarray(data).tobytes()
        raw += b"\0" * (-len(raw) % 8)
        self._push = tuple(np.frombuffer(raw, dtype=np.uint64)) if raw else ()
        self._prepared.clear()
        self._clear_grid_cache()
        return self

    def arguments(self, indirect: Buffer | None = None) -> list:
        """The kernel arguments in convention order (see the module docstring)."""
        args: list = []
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
    def _prepared_for(self, grid: tuple, indirect: Buffer | None, programmatic: bool = False) -> Any:
        # (programmatic: the GPU-driven node, a PDL dependent of its update kernel; never the
        # prepared launch of a direct or persistent dispatch, which runs outside that pairing)
        key = (grid, indirect is not None, None if indirect is None else indirect.ptr, programmatic)
        p = self._prepared.get(key)
        if p is None:
            p = self.function.bind(grid, self.block, *self.arguments(indirect), stream=self._pass.encoder.stream,
                                   programmatic_dependent=programmatic)
            self._prepared[key] = p
        return p

    def _device_indirect(self, indirect: Buffer) -> None:
        """GPU-driven indirect dispatch inside a capture: an update kernel sets
        the exact grid of a device-updatable node of this dispatch's kernel.
        On sm_90+ that node is the update kernel's programmatic dependent
        (a PDL edge: it launches once the update is made, not after the update
        kernel has retired), and so is the update kernel of the kernel captured
        just before it, if any; the dispatch's kernel itself reads nothing the
        update kernel writes, and everything before the update kernel finished
        before the update was made (the update kernel waits for it), so it
        needs no ``griddepcontrol.wait``."""
        from pycudadrv._loops import follows_kernel, patch_kernel_node

        stream = self._pass.encoder.stream
        dev = self.function.device
        pdl = dev.compute_capability >= (9, 0)
        upd = self._indirect_update_kernel()
        max_x = np.uint32(dev.attribute("max_grid_dim_x"))
        # After a kernel, the update kernel is that kernel's programmatic dependent too: it launches while
        # its producer retires and waits for it (griddepcontrol.wait) before it reads the counts.
        upd.launch(1, 1, np.uint64(0), indirect, max_x, stream=stream,
                   programmatic_dependent=pdl and follows_kernel(stream))
        cap = stream.capture_state
        node = cap.last_kernel_node()
        # The update kernel is pycudadrv's own, as a device loop's condition kernel is: not a launch the
        # graph's num_kernels counts or set_kernel_args may rewrite (its first argument is the node handle).
        if node is not None:
            cap.kernels.pop()
        p = self._prepared_for((1, 1, 1), indirect, programmatic=dev.compute_capability >= (9, 0))
        devnode = p._launch_device_updatable()
        if node is None:
            raise ArgumentValueError("indirect dispatch in a capture: the update kernel's graph node was not "
                                     "identified (needs a CUDA 12.3+ driver and a linear capture)")
        args = (np.uint64(devnode), indirect, max_x)
        cap.add_finalizer(lambda g: patch_kernel_node(g, node, upd, (1, 1, 1), (1, 1, 1), 0, args))

    # dispatch(grid=None, *, threads=None, indirect=None) is DispatchBase.dispatch (in C): a grid
    # seen before launches its prepared launch directly; every other call comes here.
    def _dispatch(self, grid: Any, threads: Any, indirect: Buffer | None) -> None:
        if sum(x is not None for x in (grid, threads, indirect)) != 1:
            raise ArgumentValueError("give exactly one of grid=, threads= or indirect=")
        if indirect is not None:
            self._dispatch_indirect(indirect)
            return
        if threads is not None:
            t = dims3(threads, "threads", True)
            g = tuple(-(-t[k] // self.block[k]) for k in range(3))
        else:
            g = dims3(grid, "grid", True)
        if 0 in g:
            return
        p = self._prepared_for(g, None)
        p.launch()
        if threads is None:
            try:
                self._cache_grid(grid, p)
            except TypeError:  # an unhashable grid (a list): no fast path for it
                pass

    def _dispatch_indirect(self, indirect: Buffer) -> None:
        if not isinstance(indirect, Buffer):
            raise ArgumentTypeError(f"indirect must be a Buffer of three u32, got {type(indirect).__name__}")
        if not indirect._has_usage(INDIRECT_BIT):
            raise missing_usage(indirect, INDIRECT_BIT, indirect.usage.value, f"Dispatch of '{self.function.name}', "
                                "indirect=")
        if indirect.nbytes == 0:
            return
        if indirect.nbytes < 12:
            raise ArgumentValueError(f"indirect buffer must hold three u32 counts (12 bytes), has {indirect.nbytes}")
        if env_flag("PYCUDADRV_INDIRECT_TRACE"):
            print(f"[pycudadrv indirect] {self.function.name} block={self.block}", file=sys.stderr, flush=True)
        stream = self._pass.encoder.stream
        if env_flag("PYCUDADRV_INDIRECT_SYNC"):
            raw = indirect.read(nbytes=12, stream=stream)
            g = tuple(int(c) for c in np.frombuffer(raw.tobytes(), dtype=np.uint32))
            if 0 not in g:
                self._prepared_for(g, None).launch()
            return
        if self.indirect_mode != "persistent" and _device_indirect_supported(stream):
            self._device_indirect(indirect)
            return
        if self.indirect_mode == "device":
            raise ArgumentValueError(f"Dispatch of '{self.function.name}': indirect_mode='device' needs a capture "
                                     "of the encoder's stream and a CUDA 12.4+ driver")
        n = _persistent_blocks(self.function, self.persistent_blocks)
        self._prepared_for((n, 1, 1), indirect).launch()

    launch = DispatchBase.dispatch

    if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise accept any attribute name
        def __getattr__(self, name: str) -> Any:
            raise missing(self, name, "_bindings", "Pass.dispatch(function)")

    def __repr__(self) -> str:
        if not initialised(self, "_bindings"):
            return "<Dispatch not initialised (made by Dispatch.__new__)>"
        return (f"<Dispatch '{self.function.name}' block={self.block} {len(self._bindings)} binding(s), "
                f"{len(self._push)} push word(s)>")


class Pass:
    """A labelled group of dispatches (optionally timed by a Timestamps)."""

    def __init__(self, encoder: Encoder, label: str) -> None:
        self.encoder = encoder
        self.label = label

    def dispatch(self, function: Function, *, block: _Dims = (64, 1, 1), persistent_blocks: int | None = None,
                 indirect_mode: str = "auto") -> Dispatch:
        """A :class:`Dispatch` of ``function`` with workgroup size ``block``;
        ``indirect_mode`` is ``"auto"``, ``"device"`` or ``"persistent"`` (see
        the module docstring)."""
        return Dispatch(self, function, block, persistent_blocks, indirect_mode)

    if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise accept any attribute name
        def __getattr__(self, name: str) -> Any:
            raise missing(self, name, "encoder", "Encoder.pass_(label)")


class Encoder:
    """Records passes of dispatches and copies onto one stream.

    Launches go on the stream as they are made; :meth:`submit` exists for
    symmetry with shader APIs and returns an Event recorded after them.
    ``device`` (None: the current device) and ``stream`` (None: the device's
    default stream) that are not a Device or a Stream raise ArgumentTypeError.
    """

    def __init__(self, device: Device | None = None, stream: Stream | None = None) -> None:
        from pycudadrv._device import Device, get_current_device
        from pycudadrv._stream import Stream

        if device is not None and not isinstance(device, Device):
            raise ArgumentTypeError(f"Encoder: device must be a pycudadrv Device or None, got "
                                    f"{type(device).__name__} {short_repr(device)}")
        if stream is not None and not isinstance(stream, Stream):
            raise ArgumentTypeError(f"Encoder: stream must be a pycudadrv Stream or None, got "
                                    f"{type(stream).__name__} {short_repr(stream)}")
        self.device = device if device is not None else get_current_device()
        self.stream = stream if stream is not None else self.device.default_stream

    @contextmanager
    def pass_(self, label: str = "pass", timestamps: Timestamps | None = None) -> Iterator[Pass]:
        """``with encoder.pass_("label", timestamps=ts) as p:``; with
        ``timestamps`` the pass is timed as ``ts.measure(label)``; with NVTX on
        (``PYCUDADRV_NVTX=1``) it is an NVTX range named ``label``."""
        p = Pass(self, label)
        with nvtx.range(label):
            if timestamps is None:
                yield p
            else:
                with timestamps.measure(label):
                    yield p

    def copy_buffer_to_buffer(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        """Device-to-device copy on the encoder's stream (``cuMemcpyDtoDAsync``);
        ranges are checked (ArgumentValueError)."""
        src.copy_to(dst, nbytes=nbytes, src_offset=src_offset, dst_offset=dst_offset, stream=self.stream)

    def submit(self) -> Event:
        """Return an Event recorded after everything encoded so far."""
        from pycudadrv._event import Event

        return Event(timing=False, device=self.device).record(self.stream)

    if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise accept any attribute name
        def __getattr__(self, name: str) -> Any:
            raise missing(self, name, "stream", "Encoder(device, stream) or Device.encoder()")


def encoder(device: Device | None = None, stream: Stream | None = None) -> Encoder:
    """``Encoder(device, stream)``; also reachable as ``Device.encoder(stream)``."""
    return Encoder(device, stream)
