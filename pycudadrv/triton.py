"""Triton kernels launched by pycudadrv: :func:`from_triton` turns a Triton 3.x
``CompiledKernel`` into a pycudadrv :class:`~pycudadrv.Function` plus its launch
configuration, so it runs through pycudadrv's launch paths (generic, prepared,
graph capture) at pycudadrv's cost per launch.

Triton's calling convention (``triton/backends/nvidia/driver.py``,
``make_launcher``), which :class:`TritonConvention` reproduces:

- the kernel takes the function's arguments in order, without the
  ``constexpr`` ones: ``tl.constexpr`` parameters and the specialisations the
  JIT made constants (an int equal to 1 unless the parameter is in
  ``do_not_specialize``, and every ``None``); tuple arguments are flattened;
- then two pointers: the global scratch and the profile scratch (Triton 3.5+;
  3.3/3.4 have the first only), allocated per launch (``metadata.global_scratch_size``
  bytes per CTA, aligned to ``global_scratch_align``) when the kernel needs them,
  else null;
- scalars: ``iN``/``uN`` integers of N bits (``i1``/``u1``: one byte), ``fp32``
  as ``float``, ``fp64`` as ``double``, ``fp16`` as IEEE half and ``bf16`` as its
  16-bit storage (the float32's upper half, as Triton truncates it);
  divisibility-by-16 specialisations keep the ABI (pycudadrv checks the values
  still divide);
- block = 32 x ``num_warps`` threads; grid x = grid[0] x ``num_ctas`` with
  clusters of ``num_ctas`` CTAs; dynamic shared memory ``metadata.shared``;
  ``launch_cooperative_grid`` and ``launch_pdl`` as launch attributes.

Triton is imported only by the caller's compiled kernel: ``import pycudadrv``
never needs it.
"""
from __future__ import annotations

import numbers
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, NotSupportedError
from pycudadrv._tritonlaunch import TritonLaunchBase

__all__ = ["from_triton", "TritonKernel", "TritonConvention", "TritonParam", "triton_convention"]

#: pycudadrv signature type of each Triton scalar type (pointers are "void*").
_SCALAR_TYPES = {"i1": "int8", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u1": "uint8",
                 "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "fp16": "half", "bf16": "uint16",
                 "fp32": "float", "f32": "float", "fp64": "double"}
_SCRATCH = "scratch"
_Grid = Any  # an int, 1 to 3 ints, or a callable of the arguments by name (as Triton's grid lambdas)


@dataclass(frozen=True)
class TritonParam:
    """One kernel parameter: ``name`` (``"x"``, ``"t[1]"`` inside a tuple,
    ``"global_scratch"``), Triton ``type`` (``"*fp32"``, ``"i32"``, ...,
    ``"scratch"``), pycudadrv ``c_type`` (``"void*"``, ``"int32"``, ``"half"``, ...),
    ``path`` (indices into the arguments; empty for scratch) and whether Triton
    specialised it as divisible by 16."""

    name: str
    type: str
    c_type: str
    path: tuple[int, ...] = ()
    divisible_by_16: bool = False


def _unsupported(message: str) -> NotSupportedError:
    err: NotSupportedError = NotSupportedError(message)  # type: ignore[no-untyped-call,unused-ignore]
    return err


def _bf16_bits(value: Any) -> int:
    # Triton's pack_bf16: (float)value, then the upper 16 bits (truncation, not rounding).
    return int(struct.unpack("<I", struct.pack("<f", float(value)))[0] >> 16)


def _simple(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _unwrap(v: Any) -> Any:
    return getattr(v, "value", v) if type(v).__name__ == "constexpr" else v


def _pointer_value(v: Any) -> int | None:
    """The device address of a pointer argument, where it is cheap to know (for the divisibility check)."""
    if v is None:
        return 0
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    ptr = getattr(v, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    dp = getattr(v, "data_ptr", None)
    if callable(dp):
        got = dp()
        return got if isinstance(got, int) else None
    cai = getattr(v, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and isinstance(cai.get("data"), tuple):
        got = cai["data"][0]
        return got if isinstance(got, int) else None
    return None


@dataclass
class TritonConvention:
    """How one compiled Triton kernel is called: its parameters and launch
    configuration, read from the ``CompiledKernel`` (``src.signature``,
    ``src.constants``, ``src.attrs``, ``metadata``). Needs no GPU."""

    name: str
    arg_names: tuple[str, ...]
    arg_types: tuple[Any, ...]
    params: tuple[TritonParam, ...]
    constants: dict[tuple[int, ...], Any]
    num_warps: int
    num_ctas: int
    shared_mem_bytes: int
    cooperative: bool
    programmatic_dependent: bool
    global_scratch_size: int
    global_scratch_align: int
    profile_scratch_size: int
    profile_scratch_align: int
    n_scratch_params: int
    target_arch: int | None
    annotated_constexprs: frozenset[int] = frozenset()
    _runtime_top: tuple[int, ...] = field(default=(), repr=False)

    @property
    def block(self) -> tuple[int, int, int]:
        """``(32 * num_warps, 1, 1)``, in threads."""
        return (32 * self.num_warps, 1, 1)

    @property
    def cluster(self) -> tuple[int, int, int] | None:
        """``(num_ctas, 1, 1)`` when the kernel runs in clusters of several CTAs, else None."""
        return (self.num_ctas, 1, 1) if self.num_ctas > 1 else None

    @property
    def signature(self) -> str:
        """The pycudadrv signature of the kernel, e.g. ``"void*, void*, int32, float, void*, void*"``."""
        return ", ".join(p.c_type for p in self.params)

    def launch_grid(self, grid: _Grid, args: Sequence[Any] = ()) -> tuple[int, int, int]:
        """The grid pycudadrv launches, in blocks: Triton's ``grid`` (1 to 3
        ints, or a callable of the arguments by name) with x times ``num_ctas``."""
        if callable(grid):
            grid = grid(self.named_args(args))
        if isinstance(grid, bool):
            raise ArgumentTypeError(f"Triton kernel '{self.name}': grid must be 1 to 3 ints, got {grid!r}")
        try:
            g = (grid,) if isinstance(grid, int) else tuple(grid)
        except TypeError:           # None, a float, any other non-iterable
            raise ArgumentTypeError(f"Triton kernel '{self.name}': grid must be 1 to 3 ints, got {grid!r:.60}") from None
        if not 1 <= len(g) <= 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in g):
            raise ArgumentTypeError(f"Triton kernel '{self.name}': grid must be 1 to 3 ints, got {grid!r}")
        g = g + (1,) * (3 - len(g))
        return (g[0] * self.num_ctas, g[1], g[2])

    def scratch_bytes(self, grid: tuple[int, int, int]) -> tuple[int, int]:
        """Bytes of global and profile scratch a launch of ``grid`` (as
        :meth:`launch_grid` returns it: CTAs) needs: per-CTA size x CTAs, as Triton's launcher allocates."""
        ctas = grid[0] * grid[1] * grid[2]
        return self.global_scratch_size * ctas, self.profile_scratch_size * ctas

    def named_args(self, args: Sequence[Any]) -> dict[str, Any]:
        """``{name: value}`` of every argument (constexpr ones from the compiled constants when not given)."""
        full = self._full_args(args)
        return dict(zip(self.arg_names, full))

    def _full_args(self, args: Sequence[Any]) -> list[Any]:
        n_all, n_rt = len(self.arg_names), len(self._runtime_top)
        if len(args) == n_all:
            return list(args)
        if len(args) == n_rt:
            full: list[Any] = [self.constants.get((i,)) for i in range(n_all)]
            for i, v in zip(self._runtime_top, args):
                full[i] = v
            return full
        rt = [self.arg_names[i] for i in self._runtime_top]
        raise ArgumentTypeError(
            f"Triton kernel '{self.name}' takes {n_all} arguments ({', '.join(self.arg_names)}) as Triton does, or "
            f"the {n_rt} that are not constexpr ({', '.join(rt)}); {len(args)} given")

    def kernel_args(self, args: Sequence[Any], scratch: Sequence[Any] = ()) -> list[Any]:
        """The values of the kernel's parameters for Triton-style ``args``
        (every argument, or only the non-constexpr ones), followed by
        ``scratch`` (the scratch pointers; None for null). Constexpr
        arguments that are given must equal the compiled value; values Triton
        specialised as divisible by 16 must still be; ``bf16`` values become
        their 16-bit storage.

        Raises ArgumentTypeError for a wrong number of arguments, a tuple
        argument of the wrong length; ArgumentValueError for a changed
        constexpr or a broken divisibility."""
        full = self._full_args(args)
        given = len(args) == len(self.arg_names)
        if given:
            for path, want in self.constants.items():
                got = self._at(full, path)
                want = _unwrap(want)
                got = _unwrap(got)
                if (want is None) != (got is None) or (_simple(want) and _simple(got) and
                                                       (type(got) is not type(want) or got != want)):
                    why = ("Triton specialised it when compiling (an int equal to 1 or None becomes a constant "
                           "unless the parameter is in do_not_specialize)" if self._specialised(path) else
                           "it is a tl.constexpr")
                    raise ArgumentValueError(
                        f"Triton kernel '{self.name}': argument {self._path_name(path)} was compiled as the constant "
                        f"{want!r} ({why}); got {got!r}: compile the kernel for this value")
        out: list[Any] = []
        for p in self.params:
            if p.type == _SCRATCH:
                continue
            v = self._at(full, p.path)
            if p.divisible_by_16:
                addr = _pointer_value(v) if p.type.startswith("*") else (
                    v if isinstance(v, int) and not isinstance(v, bool) else None)
                if addr is not None and addr % 16:
                    what = "pointer" if p.type.startswith("*") else "value"
                    raise ArgumentValueError(
                        f"Triton kernel '{self.name}': argument {p.name!r} was compiled for a {what} divisible by 16 "
                        f"(Triton's divisibility specialisation); got {addr:#x}: compile the kernel for this value")
            if p.type == "bf16" and isinstance(v, numbers.Real) and not isinstance(v, bool):
                v = _np_uint16(_bf16_bits(v))
            out.append(v)
        if len(scratch) != self.n_scratch_params:
            raise ArgumentTypeError(f"Triton kernel '{self.name}' takes {self.n_scratch_params} scratch pointers, "
                                    f"{len(scratch)} given")
        out.extend(scratch)
        return out

    def _specialised(self, path: tuple[int, ...]) -> bool:
        return not (len(path) == 1 and path[0] in self.annotated_constexprs)

    def _path_name(self, path: tuple[int, ...]) -> str:
        return repr(self.arg_names[path[0]] + "".join(f"[{j}]" for j in path[1:]))

    def _at(self, full: Sequence[Any], path: tuple[int, ...]) -> Any:
        v: Any = full
        for depth, j in enumerate(path):
            if depth and not isinstance(v, (tuple, list)):
                raise ArgumentTypeError(f"Triton kernel '{self.name}': argument {self._path_name(path[:depth])} "
                                        f"must be a tuple, got {type(v).__name__}")
            try:
                v = v[j]
            except IndexError:
                raise ArgumentTypeError(f"Triton kernel '{self.name}': argument {self._path_name(path[:depth])} "
                                        f"has too few elements for {self._path_name(path)}") from None
        return v


def _np_uint16(v: int) -> Any:
    import numpy as np

    return np.uint16(v)


def triton_convention(compiled_kernel: Any) -> TritonConvention:
    """Read the calling convention of a Triton 3.x ``CompiledKernel`` (what
    ``triton.compile(...)``, ``kernel[grid](...)`` or ``kernel.warmup(...)``
    return). Needs no GPU.

    Raises
    ------
    ArgumentTypeError
        ``compiled_kernel`` is not a Triton CompiledKernel for CUDA.
    NotSupportedError
        The kernel takes host-side tensor descriptors (TMA) or fp8 scalars,
        which this translation does not handle.
    """
    md = getattr(compiled_kernel, "metadata", None)
    src = getattr(compiled_kernel, "src", None)
    if md is None or src is None or not hasattr(src, "signature") or not hasattr(compiled_kernel, "kernel"):
        raise ArgumentTypeError(f"from_triton: expected a Triton CompiledKernel (what triton.compile() or "
                                f"kernel[grid](...) returns), got {type(compiled_kernel).__name__}")
    target = getattr(md, "target", None)
    if target is not None and getattr(target, "backend", "cuda") != "cuda":
        raise ArgumentTypeError(f"from_triton: kernel '{md.name}' was compiled for {target.backend}, not CUDA")
    sig = dict(src.signature)
    names = tuple(k if isinstance(k, str) else f"arg{k}" for k in sig)
    types = tuple(sig.values())
    fn = getattr(src, "fn", None)
    constants = {(k if isinstance(k, tuple) else (names.index(k),)): v
                 for k, v in dict(getattr(src, "constants", {}) or {}).items()}
    attrs = dict(getattr(src, "attrs", {}) or {})
    divisible = {tuple(k) for k, v in attrs.items() if any(a and a[0] == "tt.divisibility" and a[1] % 16 == 0
                                                          for a in v)}
    params: list[TritonParam] = []

    def walk(t: Any, path: tuple[int, ...], label: str) -> None:
        if isinstance(t, tuple):
            for j, sub in enumerate(t):
                walk(sub, path + (j,), f"{label}[{j}]")
            return
        if t == "constexpr":
            return
        if not isinstance(t, str):
            raise _unsupported(f"from_triton: kernel '{md.name}': argument {label} has type {t!r}")
        if t.startswith(("tensordesc", "nvTmaDesc")):
            raise _unsupported(f"from_triton: kernel '{md.name}': argument {label} is a host-side tensor "
                                    f"descriptor ({t}); launch it through Triton, or build the descriptor in the "
                                    "kernel (tl.make_tensor_descriptor)")
        if t.startswith("*"):
            c = "void*"
        elif t in _SCALAR_TYPES:
            c = _SCALAR_TYPES[t]
        else:
            raise _unsupported(f"from_triton: kernel '{md.name}': argument {label} has the scalar type {t!r}, "
                                    "which Triton's launcher cannot pass either")
        params.append(TritonParam(label, t, c, path, path in divisible))

    for i, (n, t) in enumerate(zip(names, types)):
        walk(t, (i,), n)
    if hasattr(md, "profile_scratch_size"):
        n_scratch = 2
    elif hasattr(md, "global_scratch_size"):
        n_scratch = 1
    else:
        n_scratch = 0
    for label in ("global_scratch", "profile_scratch")[:n_scratch]:
        params.append(TritonParam(label, _SCRATCH, "void*"))
    if getattr(md, "cluster_dims", None) not in (None, (1, 1, 1), [1, 1, 1]) and getattr(md, "num_ctas", 1) == 1:
        raise _unsupported(f"from_triton: kernel '{md.name}' has cluster_dims={md.cluster_dims} without "
                                "num_ctas (a Triton older than 3.3): not supported")
    conv = TritonConvention(
        name=str(md.name), arg_names=names, arg_types=types, params=tuple(params), constants=constants,
        num_warps=int(md.num_warps), num_ctas=int(getattr(md, "num_ctas", 1) or 1), shared_mem_bytes=int(md.shared or 0),
        cooperative=bool(getattr(md, "launch_cooperative_grid", False)),
        programmatic_dependent=bool(getattr(md, "launch_pdl", False)),
        global_scratch_size=int(getattr(md, "global_scratch_size", 0) or 0),
        global_scratch_align=int(getattr(md, "global_scratch_align", 1) or 1),
        profile_scratch_size=int(getattr(md, "profile_scratch_size", 0) or 0),
        profile_scratch_align=int(getattr(md, "profile_scratch_align", 1) or 1),
        n_scratch_params=n_scratch, target_arch=getattr(target, "arch", None),
        annotated_constexprs=frozenset(p.num for p in getattr(fn, "params", ()) if getattr(p, "is_constexpr", False)),
        _runtime_top=tuple(i for i, t in enumerate(types) if t != "constexpr"))
    return conv


class TritonKernel(TritonLaunchBase):
    """A Triton kernel loaded by pycudadrv (made by :func:`from_triton`).

    ``tk.launch(grid, *args, stream=None)`` and ``tk[grid](*args)`` launch it
    as Triton's ``CompiledKernel[grid](*args)`` does, through one prepared
    configuration per (grid, stream), kept and updated in place;
    ``tk.bind(grid, *args)``
    gives a :class:`~pycudadrv.PreparedLaunch` (replayed with ``p()``, or
    inside a graph capture). ``args`` are every argument of the Triton
    function in order (constexpr values are checked against the compiled
    ones) or only the non-constexpr ones. Values follow pycudadrv's
    kernel-parameter rules: Buffers, ``__cuda_array_interface__``/DLPack
    objects (torch tensors) or int addresses for pointers (a strided tensor:
    pass ``t.data_ptr()`` and keep ``t`` alive), Python or numpy scalars for
    the rest.

    Attributes: ``function`` (the pycudadrv Function), ``convention``
    (:class:`TritonConvention`), ``block``, ``shared_mem_bytes``, ``cluster``,
    ``cooperative``, ``programmatic_dependent``, ``device``, ``module``.
    """

    def __init__(self, compiled_kernel: Any, device: Any = None) -> None:
        from pycudadrv._errors import CudaError
        from pycudadrv._module import load_module
        from pycudadrv._signature import ptx_entries

        conv = triton_convention(compiled_kernel)
        self.convention = conv
        self.name = conv.name
        image = compiled_kernel.kernel
        if not isinstance(image, (bytes, bytearray)):
            raise ArgumentTypeError(f"from_triton: kernel '{conv.name}' holds no CUBIN (got "
                                    f"{type(image).__name__}); compile it for a CUDA target")
        ptx = compiled_kernel.asm.get("ptx") if hasattr(compiled_kernel, "asm") else None
        try:
            if ptx is not None and conv.name not in ptx_entries(ptx):
                ptx = None
        except ArgumentValueError:
            ptx = None   # PTX the layout parser cannot read: the driver's parameter info decides
        try:
            self.module = load_module(bytes(image), device=device, ptx=ptx)
        except CudaError as e:
            if hasattr(e, "add_note"):  # Python 3.11+
                arch = f"sm_{conv.target_arch}" if conv.target_arch else "its target"
                e.add_note(f"(loading Triton kernel '{conv.name}', compiled for {arch})")
            raise
        self.device = self.module.device
        raw = self.module.function(conv.name)
        n = raw.num_params        # from cuFuncGetParamInfo (and the PTX where it agrees)
        if n is not None and n != len(conv.params):
            raise ArgumentValueError(
                f"from_triton: kernel '{conv.name}': the CUBIN has {n} parameters ({raw.layout_source}), Triton's "
                f"calling convention gives {len(conv.params)} ({conv.signature}); was it compiled by another Triton "
                "version?")
        try:
            self.function = self.module.function(conv.name, signature=conv.signature)   # sizes checked here
        except ArgumentValueError as e:
            raise ArgumentValueError(f"from_triton: kernel '{conv.name}': the CUBIN's parameter sizes do not match "
                                     f"Triton's calling convention ({conv.signature}): {e}") from e
        if conv.block[0] > self.function.max_threads_per_block:
            raise ArgumentValueError(f"from_triton: kernel '{conv.name}': num_warps={conv.num_warps} needs "
                                     f"{conv.block[0]} threads; the kernel allows {self.function.max_threads_per_block}")
        fn: Any = self.function
        if conv.shared_mem_bytes > 49152:
            fn.set_cache_preference("shared")   # as Triton's load_binary does
        if conv.num_ctas > 1:
            try:
                fn.set_attribute("cluster_scheduling_policy_preference", 1)  # SPREAD, as Triton's launcher asks
            except CudaError:
                pass   # a scheduling hint: the launch is correct without it
            if conv.num_ctas > 8:
                fn.set_attribute("non_portable_cluster_size_allowed", 1)
        self.block = conv.block
        self.shared_mem_bytes = conv.shared_mem_bytes
        self.cluster = conv.cluster
        self.cooperative = conv.cooperative
        self.programmatic_dependent = conv.programmatic_dependent
        self._launch_grid = conv.launch_grid
        self._init_fast(*_fast_plan(conv, fn))

    launch = TritonLaunchBase.launch            # the C path (documented there); _launch_py is the Python one
    __getitem__ = TritonLaunchBase.__getitem__

    def _kernel_args(self, args: Sequence[Any]) -> list[Any]:
        """The kernel's parameter values for ``args`` with null scratch (a captured launch of the C path)."""
        return self.convention.kernel_args(args, [None] * self.convention.n_scratch_params)

    def _stream(self, stream: Any) -> Any:
        from pycudadrv._stream import Stream

        return stream if isinstance(stream, Stream) else Stream.from_handle(stream, self.device)

    def _scratch(self, grid: tuple[int, int, int], stream: Any) -> tuple[list[Any], list[Any]]:
        """Scratch pointers for a launch of ``grid`` (None when not needed) and the Buffers to free after it."""
        conv = self.convention
        if conv.n_scratch_params == 0:
            return [], []
        sizes = conv.scratch_bytes(grid)
        aligns = (conv.global_scratch_align, conv.profile_scratch_align)
        ptrs: list[Any] = []
        owned: list[Any] = []
        for size, align in list(zip(sizes, aligns))[:conv.n_scratch_params]:
            if size == 0:
                ptrs.append(None)
                continue
            view, root = _aligned_buffer(size, align, self.device, stream)
            ptrs.append(view)
            owned.append(root)
        return ptrs, owned

    def _launch_py(self, grid: _Grid, args: tuple[Any, ...], stream: Any = None) -> None:
        """:meth:`launch` in Python, for what its C path leaves to it (scratch memory, tuple and
        bf16 arguments, an empty grid) and for every error (it raises them, naming the argument)."""
        conv = self.convention
        g = conv.launch_grid(grid, args)
        if g[0] == 0 or g[1] == 0 or g[2] == 0:
            conv.kernel_args(args, [None] * conv.n_scratch_params)   # the arguments are still checked
            return
        if stream is not None and conv.n_scratch_params and (conv.global_scratch_size or conv.profile_scratch_size):
            stream = self._stream(stream)   # one wrapper for the scratch allocation and the launch
        scratch, owned = self._scratch(g, stream)
        try:
            self.function.launch(g, self.block, *conv.kernel_args(args, scratch), shared_mem_bytes=self.shared_mem_bytes,
                                 stream=stream, cooperative=self.cooperative, cluster=self.cluster,
                                 programmatic_dependent=self.programmatic_dependent)
        finally:
            for b in owned:
                b.close()

    def bind(self, grid: _Grid, *args: Any, stream: Any = None) -> Any:
        """A :class:`~pycudadrv.PreparedLaunch` of this kernel for ``grid``
        and ``args`` (``p()`` launches again; ``p.set_arg(i, v)`` changes
        kernel parameter ``i``, see :meth:`param_index`). Scratch memory is
        allocated once here and kept alive by the prepared launch (so its
        replays on one stream are ordered; do not replay one prepared launch
        on two streams at once). Raises ArgumentValueError for an empty grid,
        else as :meth:`launch` and :meth:`pycudadrv.Function.bind`."""
        conv = self.convention
        g = conv.launch_grid(grid, args)
        if g[0] == 0 or g[1] == 0 or g[2] == 0:
            raise ArgumentValueError(f"Triton kernel '{self.name}': grid {g} launches nothing; a prepared launch "
                                     "needs at least one program per dimension")
        scratch, _owned = self._scratch(g, stream)
        return self.function.bind(g, self.block, *conv.kernel_args(args, scratch), shared_mem_bytes=self.shared_mem_bytes,
                                  stream=stream, cooperative=self.cooperative, cluster=self.cluster,
                                  programmatic_dependent=self.programmatic_dependent)

    def param_index(self, name: str) -> int:
        """Index of the kernel parameter for argument ``name`` (``"x"``,
        ``"t[1]"``, ``"global_scratch"``), for ``PreparedLaunch.set_arg``.
        Raises ArgumentValueError for a constexpr or unknown name."""
        for i, p in enumerate(self.convention.params):
            if p.name == name:
                return i
        raise ArgumentValueError(f"Triton kernel '{self.name}' has no kernel parameter {name!r} (constexpr arguments "
                                 f"are not parameters); it has: {', '.join(p.name for p in self.convention.params)}")

    def __repr__(self) -> str:
        c = self.convention
        extra = "".join([f" cluster={self.cluster}" if self.cluster else "", " cooperative" if self.cooperative else "",
                         " pdl" if self.programmatic_dependent else "",
                         f" scratch={c.global_scratch_size}B/CTA" if c.global_scratch_size else ""])
        return (f"<TritonKernel '{self.name}' ({c.signature}), block={self.block}, "
                f"shared_mem_bytes={self.shared_mem_bytes}{extra}, device {self.device.ordinal}>")


def _fast_plan(conv: TritonConvention, fn: Any) -> tuple[Any, ...]:
    """The arguments of TritonLaunchBase._init_fast for ``conv``: where each kernel parameter's value
    is in every-argument and runtime-only calls, which parameters are checked for divisibility,
    the top-level constexprs to compare; ``fn`` None where the C path cannot follow the convention
    (scratch memory, tuple or bf16 arguments, constants inside tuples)."""
    n_all, n_rt = len(conv.arg_names), len(conv._runtime_top)
    src_all: list[int] = []
    src_rt: list[int] = []
    div16: list[int] = []
    div16_int: list[int] = []
    rt_pos = {top: j for j, top in enumerate(conv._runtime_top)}
    plain = not (conv.n_scratch_params and (conv.global_scratch_size or conv.profile_scratch_size))
    plain = plain and all(len(path) == 1 for path in conv.constants)
    for k, p in enumerate(conv.params):
        if p.type == _SCRATCH:
            src_all.append(-1)
            src_rt.append(-1)
            continue
        if len(p.path) != 1 or p.type == "bf16" or p.path[0] not in rt_pos:
            plain = False
            break
        src_all.append(p.path[0])
        src_rt.append(rt_pos[p.path[0]])
        if p.divisible_by_16:
            (div16 if p.type.startswith("*") else div16_int).append(k)
    div16 += div16_int
    pos = sorted(path[0] for path in conv.constants)
    want = [_unwrap(conv.constants[(i,)]) for i in pos]
    return (fn if plain else None, src_all, src_rt, n_all, n_rt, div16, div16_int, pos, want,
            [_simple(w) for w in want])


def _aligned_buffer(size: int, align: int, device: Any, stream: Any) -> tuple[Any, Any]:
    """``(view, root)``: ``size`` bytes of device memory aligned to ``align`` (stream-ordered allocation)."""
    from pycudadrv._memory import Buffer

    root = Buffer.empty(size, device=device, stream=stream)
    if align <= 1 or root.ptr % align == 0:
        return root, root
    root.close()
    root = Buffer.empty(size + align, device=device, stream=stream)
    off = (-root.ptr) % align
    return root[off:off + size], root


def from_triton(compiled_kernel: Any, device: Any = None) -> TritonKernel:
    """Load a Triton 3.x ``CompiledKernel``'s CUBIN with pycudadrv and return
    a :class:`TritonKernel` that launches it with Triton's calling convention
    (see the module docstring) through pycudadrv's launch paths
    (``cuModuleLoadDataEx``, ``cuFuncGetParamInfo``, ``cuLaunchKernel``/``Ex``).

    Parameters
    ----------
    compiled_kernel : triton.compiler.CompiledKernel
        What ``triton.compile(...)``, ``kernel[grid](...)`` or ``kernel.warmup(...)`` return.
    device : Device or int, optional
        The current device by default; must match the kernel's target architecture.

    Raises
    ------
    ArgumentTypeError
        Not a Triton CompiledKernel for CUDA.
    ArgumentValueError
        The CUBIN's parameter count or sizes (``cuFuncGetParamInfo``) disagree
        with Triton's convention, or ``num_warps`` exceeds the kernel's thread limit.
    NotSupportedError
        Host-side tensor descriptors (TMA) or fp8 scalar arguments.
    CudaError
        The driver refused the CUBIN (e.g. compiled for another architecture).
    """
    return TritonKernel(compiled_kernel, device=device)

