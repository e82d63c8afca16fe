"""Linking device code: :class:`Linker` (nvJitLink: LTO-IR, PTX, CUBIN,
fatbins and libraries into one CUBIN, with link-time optimisation) and
:func:`build_fatbin` (nvFatbin: several CUBINs and PTX in one fatbin).

Both libraries are loaded at run time, like NVRTC: ``$PYCUDADRV_NVJITLINK`` /
``$PYCUDADRV_NVFATBIN`` (a path; no fallback when set), the ``nvidia-nvjitlink``
/ ``nvidia-nvfatbin`` wheels, ``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda``,
then the system loader. Neither needs a GPU.

>>> import pycudadrv as cd
>>> a = cd.compile(kernel_calling_f, arch="sm_90", target="ltoir")
>>> b = cd.compile(definition_of_f, arch="sm_90", target="ltoir")
>>> mod = cd.Linker(arch="sm_90").add(a).add(b).link().load()
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import struct
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, Union

from pycudadrv import _compile_cache
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, LinkError, LinkerUnavailableError, short_repr
from pycudadrv._linklibs import _identity, _link_error, _load, _version, fatbin_image
from pycudadrv.nvrtc import ObjectCode, _parse_arch
from pycudadrv._textargs import yes_no, _strings

__all__ = ["Linker", "build_fatbin", "fatbin_entries", "nvjitlink_version", "nvfatbin_version",
           "device_runtime_library", "LinkError", "LinkerUnavailableError"]

InputKind = Literal["cubin", "ptx", "ltoir", "fatbin", "object", "library"]
#: nvJitLinkInputType of each input kind.
_NVJITLINK_INPUT = {"cubin": 1, "ptx": 2, "ltoir": 3, "fatbin": 4, "object": 5, "library": 6}
_NVJITLINK_RESULTS = [
    "NVJITLINK_SUCCESS", "NVJITLINK_ERROR_UNRECOGNIZED_OPTION", "NVJITLINK_ERROR_MISSING_ARCH",
    "NVJITLINK_ERROR_INVALID_INPUT", "NVJITLINK_ERROR_PTX_COMPILE", "NVJITLINK_ERROR_NVVM_COMPILE",
    "NVJITLINK_ERROR_INTERNAL", "NVJITLINK_ERROR_THREADPOOL", "NVJITLINK_ERROR_UNRECOGNIZED_INPUT",
    "NVJITLINK_ERROR_FINALIZE", "NVJITLINK_ERROR_NULL_INPUT", "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
    "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE", "NVJITLINK_ERROR_ARCH_MISMATCH", "NVJITLINK_ERROR_OUTDATED_LIBRARY",
    "NVJITLINK_ERROR_MISSING_FATBIN", "NVJITLINK_ERROR_UNRECOGNIZED_ARCH", "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
    "NVJITLINK_ERROR_LTO_NOT_ENABLED"]
LTOIR_MAGIC = b"\xedCN\x7f"
FATBIN_MAGIC = b"\x50\xed\x55\xba"
ARCHIVE_MAGIC = b"!<arch>\n"
#: Fatbin entry kinds (the ``kind`` field of each entry header), as cuobjdump names them.
FATBIN_KINDS = {1: "ptx", 2: "cubin", 8: "ltoir"}
# Unresolved symbols that mean the device runtime (libcudadevrt) is missing from a link.
_DEVRT_SYMBOLS = ("__cudaCDP", "cudaGetParameterBuffer", "cudaLaunchDevice", "cudaCGGet", "cudaDeviceSynchronize",
                  "__cudaRegisterLinkedBinary", "cudaGetLastError")

_lock = threading.Lock()   # the linker thread's start
_linker_thread: threading.Thread | None = None
_linker_jobs: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]] = queue.SimpleQueue()


def nvjitlink_version() -> tuple[int, int]:
    """``(major, minor)`` of the nvJitLink that :class:`Linker` uses (``nvJitLinkVersion``;
    (0, 0) for a library too old to say). Raises LinkerUnavailableError when none is found."""
    return _version("nvjitlink")


def nvfatbin_version() -> tuple[int, int]:
    """``(major, minor)`` of the nvFatbin that :func:`build_fatbin` uses.
    Raises LinkerUnavailableError when none is found."""
    return _version("nvfatbin")


# --- the one thread that calls nvJitLink ------------------------------------------------------------

def _linker_thread_main() -> None:
    while True:
        job, box, done = _linker_jobs.get()
        try:
            box.append((True, job()))
        except BaseException as e:  # handed to the waiting thread
            box.append((False, e))
        finally:
            done.set()


def run_on_linker_thread(job: Callable[[], Any]) -> Any:
    """Run ``job`` on pycudadrv's one nvJitLink thread (started on first use,
    a daemon) and return its result or raise its exception. Every nvJitLink
    call of a link goes through this one thread: nvJitLink 13.5 keeps a lock
    held by the thread whose ``nvJitLinkAddData`` failed with
    ``NVJITLINK_ERROR_INVALID_INPUT``, so a link on any other thread after
    that waits forever, while the same thread goes on. The wait lets Ctrl-C
    through at once (KeyboardInterrupt); the link then finishes in the
    background and its result is dropped."""
    global _linker_thread
    with _lock:
        if _linker_thread is None or not _linker_thread.is_alive():   # first use, or a forked child
            _linker_jobs_reset()
            _linker_thread = threading.Thread(target=_linker_thread_main, name="pycudadrv-nvjitlink", daemon=True)
            _linker_thread.start()
    box: list[Any] = []
    done = threading.Event()
    _linker_jobs.put((job, box, done))
    while not done.wait(0.05):
        pass
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _linker_jobs_reset() -> None:
    # A forked child inherits the parent's queue, possibly with jobs the parent's thread never took.
    global _linker_jobs
    _linker_jobs = queue.SimpleQueue()


# --- nvFatbin -----------------------------------------------------------------------------------

def build_fatbin(entries: Sequence[tuple[str, bytes, str]], *, identifier: str = "kernel.cu",
                 options: Sequence[str] = ()) -> bytes:
    """A fatbin holding ``entries``: ``(kind, data, arch)`` with kind
    ``"cubin"``, ``"ptx"`` or ``"ltoir"`` and arch ``"sm_90"`` style
    (``nvFatbinCreate``, ``nvFatbinAddCubin``/``AddPTX``/``AddLTOIR``,
    ``nvFatbinGet``). ``identifier`` names the entries for tools such as
    cuobjdump; ``options`` go to ``nvFatbinCreate`` (e.g. ``"-compress=false"``).

    Raises
    ------
    LinkerUnavailableError
        nvFatbin is not installed (``pip install nvidia-nvfatbin``).
    LinkError
        nvFatbin refused an entry (e.g. a CUBIN whose ELF architecture is not
        ``arch``); ``code`` is the ``nvFatbinResult``.
    ArgumentValueError
        No entry (a fatbin of nothing loads nothing), an unknown kind or a
        malformed arch.
    """
    if not isinstance(identifier, str) or not identifier or "\0" in identifier:
        raise ArgumentTypeError(f"build_fatbin: identifier must be a non-empty str without NUL bytes (a name for "
                                f"the entries), got {type(identifier).__name__} {identifier!r:.60}")
    checked = []
    listed = _fatbin_entry_list(entries)
    if not listed:
        raise ArgumentValueError("build_fatbin: entries is empty; give at least one (kind, data, arch) entry")
    for k, (kind, data, arch) in enumerate(listed):
        a = _parse_arch(arch, "an entry's arch", "build_fatbin")
        if kind not in ("cubin", "ptx", "ltoir"):
            raise ArgumentValueError(f"build_fatbin: entry kind must be 'cubin', 'ptx' or 'ltoir', got {kind!r}")
        number = int(a.split("_", 1)[1].rstrip("af"))
        if kind == "cubin":
            if a.startswith("compute_"):
                raise ArgumentValueError(f"build_fatbin: entry #{k} is a CUBIN labelled {a}, a virtual "
                                         "architecture: a CUBIN is machine code for a real one (sm_XX)")
            info = cubin_elf_info(bytes(data))
            if info is not None and info[1] and info[1] != number:
                raise ArgumentValueError(f"build_fatbin: entry #{k} is a CUBIN for sm_{info[1]} labelled {a}: the "
                                         "driver would pick it for the wrong GPU")
        elif kind == "ptx":
            m = re.search(rb"^\s*\.target\s+(?:sm|compute)_([0-9]+)", bytes(data), re.M)
            if m is not None and int(m.group(1)) > number:
                raise ArgumentValueError(f"build_fatbin: entry #{k} is PTX for .target sm_{int(m.group(1))} labelled "
                                         f"{a}: a GPU of {a} cannot JIT it")
        checked.append((kind, data, a))
    opts = [o.encode() for o in _strings(options, "options", who="build_fatbin")]
    return fatbin_image(checked, identifier, opts)


def _fatbin_entry_list(entries: object) -> list[tuple[str, bytes, str]]:
    """``entries`` of build_fatbin as a list of (kind, bytes, arch); ArgumentTypeError naming the entry otherwise."""
    if isinstance(entries, (str, bytes)) or not hasattr(entries, "__iter__"):
        raise ArgumentTypeError(f"build_fatbin: entries must be a sequence of (kind, data, arch), got "
                                f"{type(entries).__name__}")
    out = []
    for k, e in enumerate(entries):  # type: ignore[attr-defined]
        if not isinstance(e, tuple) or len(e) != 3:
            raise ArgumentTypeError(f"build_fatbin: entry #{k} must be a (kind, data, arch) tuple, got {e!r:.80}")
        kind, data, arch = e
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"build_fatbin: entry #{k}'s data must be bytes (PTX text encoded), got "
                                    f"{type(data).__name__}")
        out.append((kind, bytes(data), arch))
    return out


def fatbin_entries(image: bytes) -> list[tuple[str, str]]:
    """``[(kind, arch), ...]`` of the entries of a fatbin, in order, e.g.
    ``[("cubin", "sm_80"), ("cubin", "sm_90"), ("ptx", "sm_90")]`` (kind
    ``"ptx"``, ``"cubin"``, ``"ltoir"`` or ``"kind<N>"``). Reads only the
    container's entry headers (magic 0xBA55ED50, 16-byte header with the
    payload size; each entry: u16 kind, u32 header size at 4, u64 payload size
    at 8, u32 architecture at 28), as cuobjdump lists them; compressed
    payloads are not opened. Raises ArgumentTypeError for anything but
    bytes-like, ArgumentValueError for bytes that are not a well-formed fatbin."""
    try:
        data = bytes(memoryview(image))
    except TypeError:
        raise ArgumentTypeError(f"fatbin_entries: a fatbin is bytes-like, got {type(image).__name__}") from None
    if len(data) < 16 or data[:4] != FATBIN_MAGIC:
        raise ArgumentValueError(f"fatbin_entries: not a fatbin (first bytes {data[:8]!r}, magic 0xBA55ED50 expected)")
    _magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", data, 0)
    end = hsize + fsize
    if hsize < 16:
        raise ArgumentValueError(f"fatbin_entries: malformed header (header size {hsize}, at least 16 expected)")
    if end > len(data):
        raise ArgumentValueError(f"fatbin_entries: header says {end} bytes, the image has {len(data)}")
    out = []
    off = hsize
    while off < end:
        if off + 32 > end:
            raise ArgumentValueError(f"fatbin_entries: truncated entry header at byte {off}")
        kind, _ver, ehsize, psize = struct.unpack_from("<HHIQ", data, off)
        (arch,) = struct.unpack_from("<I", data, off + 28)
        if ehsize < 32 or off + ehsize + psize > end:
            raise ArgumentValueError(f"fatbin_entries: entry at byte {off} overruns the fatbin")
        out.append((FATBIN_KINDS.get(kind, f"kind{kind}"), f"sm_{arch}"))
        off += ehsize + psize
    return out


# --- nvJitLink ------------------------------------------------------------------------------------

def device_runtime_library() -> str:
    """Path of ``libcudadevrt.a`` (the device runtime: dynamic parallelism),
    from the nvidia-cuda-runtime wheel, ``$CUDA_HOME``/``$CUDA_PATH`` or
    ``/usr/local/cuda``. Raises LinkerUnavailableError when there is none."""
    cands = []
    try:
        import nvidia  # type: ignore[import-untyped,import-not-found,unused-ignore]

        for base in list(nvidia.__path__):
            cands += sorted(glob.glob(os.path.join(base, "*", "lib", "libcudadevrt.a")))
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cands += [os.path.join(root, "lib64", "libcudadevrt.a"), os.path.join(root, "lib", "libcudadevrt.a")]
    cands.append("/usr/local/cuda/lib64/libcudadevrt.a")
    for c in cands:
        if os.path.isfile(c):
            return c
    raise LinkerUnavailableError("the device runtime library libcudadevrt.a was not found; looked at: "
                                 + ", ".join(cands) + ". Install it with `pip install nvidia-cuda-runtime` or set "
                                 "CUDA_HOME to a CUDA toolkit.")


# --- what a CUBIN's ELF header says ---------------------------------------------------------------

#: ELF e_machine of CUDA (EM_CUDA) and the e_type values of a CUBIN: ET_REL (relocatable, ``-rdc=true``,
#: what a link needs) and ET_EXEC (whole-program code: its kernels are not symbols nvJitLink links).
EM_CUDA, ET_REL, ET_EXEC = 190, 1, 2


def cubin_elf_info(data: bytes) -> tuple[int, int] | None:
    """``(e_type, sm)`` of a CUDA ELF (CUBIN) image, e.g. ``(ET_REL, 90)``;
    None for bytes that are not a 64-bit little-endian CUDA ELF. ``sm`` is the
    real architecture number from ``e_flags``: bits 8..15 from ABI version 8
    (CUDA 13's layout, ``EF_CUDA_SM_MASK``), the low byte before it
    (``EF_CUDA_SM``), as LLVM's ``ELF.h`` reads them (0 when unreadable). The
    ``a``/``f`` variant is not recorded there, so it is not reported."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_machine != EM_CUDA:
        return None
    (flags,) = struct.unpack_from("<I", data, 48)
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    return e_type, sm


def _fatbin_cubins(data: bytes) -> list[tuple[int, int]]:
    """``(sm, e_type)`` of each uncompressed CUBIN entry of a fatbin (compressed ones cannot be read here)."""
    try:
        entries = fatbin_entries(data)
    except ArgumentValueError:
        return []
    out = []
    _magic, _ver, off = struct.unpack_from("<IHH", data, 0)
    for kind, _arch in entries:
        _k, _v, ehsize, psize = struct.unpack_from("<HHIQ", data, off)
        if kind == "cubin":
            info = cubin_elf_info(data[off + ehsize:off + ehsize + min(psize, 64)])
            if info is not None:
                out.append((info[1], info[0]))
        off += ehsize + psize
    return out


def _sass_runs_on(sm: int, target: int) -> bool:
    """Whether SASS for ``sm`` may be linked for ``target``: the same major version, no newer minor."""
    return sm // 10 == target // 10 and sm <= target


_RDC_HINT = ("compile it with options=['-rdc=true'] (relocatable device code: an ET_REL CUBIN), or with "
             "target='ltoir' for link-time optimisation; a CUBIN that needs no linking loads as it is (.load())")


def _kind_of(data: bytes) -> str:
    head = data[:8]
    if head[:4] == b"\x7fELF":
        return "cubin"
    if head[:4] == FATBIN_MAGIC:
        return "fatbin"
    if head[:4] == LTOIR_MAGIC:
        return "ltoir"
    if head == ARCHIVE_MAGIC:
        return "library"
    if data and all(c in (9, 10, 13) or 32 <= c < 127 for c in data[:4096].rstrip(b"\0")):
        if b".version" in data:         # every PTX module has one: other text is not PTX
            return "ptx"
        raise ArgumentValueError(f"Linker.add: these bytes are text but not PTX (no .version directive; first bytes "
                                 f"{head!r}): pass the file's contents, or a path as a str")
    raise ArgumentValueError(f"Linker.add: cannot tell what these bytes are (first bytes {head!r}); pass kind= "
                             "('cubin', 'ptx', 'ltoir', 'fatbin', 'object' or 'library')")


_Input = Union[ObjectCode, bytes, bytearray, memoryview, str]


class Linker:
    """Links device code into one CUBIN with nvJitLink, as cuda.core's
    ``Linker`` does: LTO-IR (``compile(..., target="ltoir")``), PTX, CUBIN,
    fatbins and static libraries, with link-time optimisation whenever an
    input is LTO-IR.

    Parameters
    ----------
    *objects : ObjectCode or bytes
        Inputs to add at once (same as :meth:`add` for each).
    arch : str, optional
        ``"sm_90"`` style; defaults to the inputs' architecture (the newest
        of the ObjectCode inputs), else the current device's.
    options : str or sequence of str
        nvJitLink options (``"-O3"``, ``"-lineinfo"``, ``"-maxrregcount=64"``,
        ``"-ftz=1"``, ``"-Xptxas=-v"``, ...; one string is split as a shell
        would). ``-arch`` is refused (use ``arch=``); ``-lto`` is added for LTO-IR inputs.
    device_runtime : bool
        Link the device runtime library (``libcudadevrt.a``,
        :func:`device_runtime_library`), needed by kernels that launch kernels
        (dynamic parallelism).
    use_cache : bool
        Look the result up in (and store it into) the disk cache of
        ``compile()``: the key is a SHA-256 of every input's bytes and kind,
        the options, the architecture and the nvJitLink library.

    Raises ArgumentValueError for a malformed ``arch`` or a ``-arch`` option,
    ArgumentTypeError when ``device_runtime`` or ``use_cache`` is not a bool
    (a truthy ``"no"`` is a mistake, not a yes). Every nvJitLink call runs on
    one long-lived thread (:func:`run_on_linker_thread`).

    The result of :meth:`link` is an :class:`~pycudadrv.nvrtc.ObjectCode`
    (target ``"cubin"``) that loads through the module cache; it carries the
    PTX and the source declarations of the ObjectCode inputs, so launches know
    each kernel's parameter types.
    """

    def __init__(self, *objects: _Input, arch: str | None = None, options: str | Sequence[str] = (),
                 device_runtime: bool = False, use_cache: bool = True) -> None:
        self.arch = None if arch is None else _parse_arch(arch, "arch", "Linker")
        if self.arch is not None and not self.arch.startswith("sm_"):
            raise ArgumentValueError(f"Linker: arch must be a real architecture ('sm_90'), got {arch!r}")
        self.options = _strings(options, "options", split=True, who="Linker")
        for o in self.options:
            if o.startswith(("-arch", "--gpu-architecture")):
                raise ArgumentValueError(f"Linker: give the architecture as arch=..., not in options ({o!r})")
        self.device_runtime = yes_no(device_runtime, "device_runtime", "Linker")
        self.use_cache = yes_no(use_cache, "use_cache", "Linker")
        self._inputs: list[tuple[str, bytes, str, ObjectCode | None]] = []
        for obj in objects:
            self.add(obj)

    def add(self, obj: _Input, kind: InputKind | None = None, name: str | None = None) -> Linker:
        """Add one input: an ObjectCode (its target says the kind), bytes
        (``kind`` given or told from the first bytes: ELF, fatbin, LTO-IR,
        ``!<arch>`` archive, PTX text) or a path to a file (str). Returns the
        Linker, so calls chain. Raises ArgumentValueError for an unknown kind,
        bytes that cannot be told apart, or a CUBIN that is not relocatable
        (ELF type ET_EXEC: compiled without ``-rdc=true``, so nvJitLink would
        drop its kernels); ArgumentTypeError for another type."""
        src_obj: ObjectCode | None = None
        if name is not None and (not isinstance(name, str) or "\0" in name):
            raise ArgumentTypeError(f"Linker.add: name must be a str (the input's name in nvJitLink's messages) or "
                                    f"None, got {type(name).__name__} {name!r:.60}")
        if isinstance(obj, os.PathLike):
            obj = os.fspath(obj)
            if isinstance(obj, bytes):
                obj = os.fsdecode(obj)
        if isinstance(obj, ObjectCode):
            if kind is not None and kind != obj.target:
                raise ArgumentValueError(f"Linker.add: kind={kind!r} but the ObjectCode is {obj.target}")
            data, kind, src_obj = obj.image, obj.target, obj  # type: ignore[assignment]
            name = name or obj.name
        elif isinstance(obj, str):
            if not os.path.exists(obj) and ("\n" in obj or ".version" in obj):
                raise ArgumentTypeError("Linker.add: a str is a file path; this one looks like PTX text: pass its bytes "
                                        f"(text.encode()), got {short_repr(obj)}")
            try:
                with open(obj, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise ArgumentValueError(f"Linker.add: cannot read {short_repr(obj)}: {e.strerror}") from None
            name = name or os.path.basename(obj)
        elif isinstance(obj, (bytes, bytearray, memoryview)):
            data = bytes(obj)
        else:
            raise ArgumentTypeError(f"Linker.add: an input is an ObjectCode, bytes or a file path, got "
                                    f"{type(obj).__name__}")
        if not data:
            raise ArgumentValueError("Linker.add: empty input")
        k = kind or _kind_of(data)
        if k not in _NVJITLINK_INPUT:
            raise ArgumentValueError(f"Linker.add: kind must be one of {sorted(_NVJITLINK_INPUT)}, got {k!r}")
        if k == "ptx" and not data.endswith(b"\0"):
            data += b"\0"
        label = name or f"input{len(self._inputs)}.{k}"
        if k == "cubin":
            info = cubin_elf_info(data)
            if info is not None and info[0] == ET_EXEC:
                raise ArgumentValueError(
                    f"Linker.add: {label} is a non-relocatable CUBIN (ELF type ET_EXEC, sm_{info[1]}): nvJitLink "
                    f"would link it and silently drop its kernels; {_RDC_HINT}")
        self._inputs.append((k, data, label, src_obj))
        return self

    def _check_inputs(self, arch: str) -> None:
        """Refuse, before nvJitLink sees them, inputs that cannot give a module with their kernels for ``arch``."""
        target = int(arch.split("_", 1)[1].rstrip("af"))
        for k, d, n, o in self._inputs:
            if k == "cubin":
                info = cubin_elf_info(d)
                if info is not None and info[1] and not _sass_runs_on(info[1], target):
                    raise ArgumentValueError(
                        f"Linker.link: {n} is a CUBIN for sm_{info[1]}, which cannot be linked for {arch} (machine "
                        f"code links only into the same major architecture, not an older one); compile it for "
                        f"arch={arch!r}, or as target='ltoir' or 'ptx' to link it for any newer architecture")
                if o is not None and o.arch.endswith("a") and o.arch != arch:
                    raise ArgumentValueError(
                        f"Linker.link: {n} is a CUBIN for {o.arch} (architecture-specific features), which links "
                        f"only for arch={o.arch!r}, not {arch}")
            elif k == "fatbin":
                usable = sorted((sm, t) for sm, t in _fatbin_cubins(d) if _sass_runs_on(sm, target))
                if usable and usable[-1][1] == ET_EXEC:
                    raise ArgumentValueError(
                        f"Linker.link: {n} is a fatbin whose CUBIN for {arch} (sm_{usable[-1][0]}) is not "
                        f"relocatable (ELF type ET_EXEC): nvJitLink would take it and silently drop its kernels; "
                        f"{_RDC_HINT}")

    def _link_arch(self) -> str:
        if self.arch is not None:
            return self.arch
        archs = [o.arch for _k, _d, _n, o in self._inputs if o is not None]
        if archs:
            best = max(archs, key=lambda a: int(a.split("_", 1)[1].rstrip("af")))
            return "sm_" + best.split("_", 1)[1]
        from pycudadrv.nvrtc import _default_arch, _no_gpu_arch
        from pycudadrv._errors import CudaError

        try:
            return _parse_arch(_default_arch())
        except CudaError as e:
            raise _no_gpu_arch(e, "Linker") from e

    def link(self) -> ObjectCode:
        """Link the inputs into one CUBIN (``nvJitLinkCreate``, ``nvJitLinkAddData``,
        ``nvJitLinkComplete``, ``nvJitLinkGetLinkedCubin``).

        Raises
        ------
        LinkError
            nvJitLink refused the inputs; the message and ``.log`` hold its
            error log (and a hint when the device runtime is missing); ``code``
            is the ``nvJitLinkResult``.
        LinkerUnavailableError
            nvJitLink (or libcudadevrt.a) is not installed.
        ArgumentValueError
            No inputs; a CUBIN input for another architecture than ``arch``
            (machine code links only into the same major architecture, at
            the same or a newer minor: sm_80 into sm_86, never into sm_90 or
            sm_75; an ``sm_90a`` CUBIN only into sm_90a); a fatbin whose CUBIN
            for ``arch`` is not relocatable (read from the ELF header of each
            uncompressed entry).
        KeyboardInterrupt
            Ctrl-C during the link: raised at once; nvJitLink finishes in a
            background thread.
        """
        if not self._inputs:
            raise ArgumentValueError("Linker.link: no inputs (add ObjectCode or bytes with Linker.add)")
        arch = self._link_arch()
        self._check_inputs(arch)
        inputs = list(self._inputs)
        if self.device_runtime:
            path = device_runtime_library()
            with open(path, "rb") as f:
                inputs.append(("library", f.read(), "libcudadevrt.a", None))
        lto = any(k == "ltoir" for k, _d, _n, _o in inputs)
        opts = [f"-arch={arch}", *(["-lto"] if lto and "-lto" not in self.options else []), *self.options]
        ptx = "\n".join(o.ptx for _k, _d, _n, o in inputs if o is not None and o.ptx) or None
        decls: dict[str, Any] = {}
        lowered: dict[str, str] = {}
        for _k, _d, _n, o in inputs:
            if o is not None:
                decls.update(o.source_decls or {})
                lowered.update(o.lowered_names)
        nvrtc_ver = max((o.nvrtc_version for _k, _d, _n, o in inputs if o is not None), default=(0, 0))
        lib, _path = _load("nvjitlink")
        version = nvjitlink_version()
        cache_key = None
        if self.use_cache and _compile_cache.cache_dir():
            parts = [b"pycudadrv link v1", arch.encode(), json.dumps(opts).encode(),
                     json.dumps(_identity("nvjitlink")).encode()]
            for k, d, n, _o in inputs:
                parts += [k.encode(), n.encode(), d]
            cache_key = _compile_cache.key(*parts)
            hit = _compile_cache.fetch(cache_key, ObjectCode)
            if hit is not None:
                return hit
        cubin, info = run_on_linker_thread(lambda: _nvjitlink(lib, inputs, opts, version))
        obj = ObjectCode(image=cubin, target="cubin", arch=arch, ptx=ptx, log=info, options=tuple(opts),
                         lowered_names=lowered, nvrtc_version=nvrtc_ver, source_decls=decls or None,
                         name="+".join(n for _k, _d, n, _o in inputs), linker_version=version)
        if cache_key is not None:
            _compile_cache.store(cache_key, obj)
        return obj

    def __repr__(self) -> str:
        return (f"<Linker for {self.arch or '(inputs arch)'}, {len(self._inputs)} inputs, "
                f"options={list(self.options)}>")


def _nvjitlink(lib: ctypes.CDLL, inputs: Sequence[tuple[str, bytes, str, ObjectCode | None]], opts: Sequence[str],
               version: tuple[int, int]) -> tuple[bytes, str]:
    handle = ctypes.c_void_p()
    copts = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])

    def logs() -> tuple[str, str]:
        out = []
        for fn in ("Error", "Info"):
            n = ctypes.c_size_t()
            if getattr(lib, f"nvJitLinkGet{fn}LogSize")(handle, ctypes.byref(n)) != 0 or n.value <= 1:
                out.append("")
                continue
            buf = ctypes.create_string_buffer(n.value)
            getattr(lib, f"nvJitLinkGet{fn}Log")(handle, buf)
            out.append(buf.value.decode(errors="replace"))
        return out[0], out[1]

    def fail(code: int, what: str) -> LinkError:
        err, info = logs() if handle.value else ("", "")
        name = _NVJITLINK_RESULTS[code] if 0 <= code < len(_NVJITLINK_RESULTS) else f"nvJitLinkResult {code}"
        msg = (f"{what} failed: {name} (nvJitLink {version[0]}.{version[1]}, options: {' '.join(opts)}; inputs: "
               + ", ".join(f"{n} ({k}, {len(d)} bytes)" for k, d, n, _o in inputs) + ")")
        if any(s in err for s in _DEVRT_SYMBOLS):
            msg += "\nAn unresolved device-runtime symbol: link with Linker(..., device_runtime=True)."
        if code == 14:  # OUTDATED_LIBRARY: an input made by a newer compiler than this nvJitLink
            msg += "\nAn input is newer than this nvJitLink: install an nvJitLink at least as new as the NVRTC used."
        return _link_error(msg, log=(err + ("\n" + info if info else "")).strip(), code=code)

    r = lib.nvJitLinkCreate(ctypes.byref(handle), len(opts), copts)
    if r != 0:
        raise fail(r, "nvJitLinkCreate")
    try:
        for k, d, n, _o in inputs:
            r = lib.nvJitLinkAddData(handle, _NVJITLINK_INPUT[k], d, len(d), n.encode())
            if r != 0:
                raise fail(r, f"nvJitLinkAddData ({n}, {k})")
        r = lib.nvJitLinkComplete(handle)
        if r != 0:
            raise fail(r, "nvJitLinkComplete")
        size = ctypes.c_size_t()
        r = lib.nvJitLinkGetLinkedCubinSize(handle, ctypes.byref(size))
        if r != 0:
            raise fail(r, "nvJitLinkGetLinkedCubinSize")
        buf = ctypes.create_string_buffer(size.value)
        r = lib.nvJitLinkGetLinkedCubin(handle, buf)
        if r != 0:
            raise fail(r, "nvJitLinkGetLinkedCubin")
        return buf.raw[:size.value], logs()[1]
    finally:
        lib.nvJitLinkDestroy(ctypes.byref(handle))
