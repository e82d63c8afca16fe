"""The on-disk cache of compile() and Linker.link() results. Pure Python.

One file per result, named by the SHA-256 of everything that determines the
compiler's or linker's output (see :func:`key`); the callers decide what that
is (``compile()``: source, name, headers, options, name expressions, target,
architecture and the identity of the NVRTC library; ``link()``: every input's
bytes and kind, the options, the architecture and the nvJitLink library).

File layout: ``MAGIC | sha256(body) (32 bytes) | body``, where body is a u32
length of a JSON header, the JSON, then the image bytes. The JSON holds the
entry's own key, so a valid entry under another entry's name (copied or
renamed) is never taken for that one. Files are written to a temporary name
and renamed, so a reader never sees half a file; a file whose checksum or key
does not match is ignored (the caller compiles again and rewrites it).

The directory has a size limit (``PYCUDADRV_CACHE_MAX_BYTES``, default 1 GiB):
after each write the least recently used entries (by access time, which a hit
sets explicitly, so ``noatime`` mounts do not matter) are removed until the
total fits. An entry larger than the limit is not written, and the others are
still cut down to the limit (so 0 keeps nothing). A directory that cannot be
created or written warns once (``RuntimeWarning``) and the call goes on
without the cache; an entry's path that is taken by something other than a
regular file (a directory) warns once, naming that entry, and only that
result goes uncached.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import stat
import struct
import tempfile
import threading
import time
import warnings
from typing import Any, TypeVar

from pycudadrv._env import env_flag, env_int

__all__ = ["cache_dir", "default_cache_dir", "cache_dir_problem", "clear_cache", "cache_size", "cache_max_bytes", "key", "read", "write", "store", "fetch",
           "library_identity", "loaded_path", "DEFAULT_MAX_BYTES"]

MAGIC = b"PYCUDADRV-CACHE1"
SUFFIX = ".nvrtc"
#: Default size limit of the cache directory, in bytes (``PYCUDADRV_CACHE_MAX_BYTES`` overrides it).
DEFAULT_MAX_BYTES = 1 << 30
#: No single entry larger than this is ever read (a FIFO or a huge file planted in the directory).
_READ_LIMIT = 1 << 30
#: Temporary files older than this (seconds) are leftovers of a writer that died: removed when evicting.
_STALE_TMP_S = 3600.0
_warned: set[tuple[str, str]] = set()
#: A relative ``PYCUDADRV_CACHE_DIR`` -> the absolute directory it named at its first use (the process may
#: change its working directory later; the cache stays where it was).
_relative_dirs: dict[str, str] = {}
_relative_lock = threading.Lock()
T = TypeVar("T")


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/pycudadrv`` (an absolute ``XDG_CACHE_HOME`` only, as
    the XDG specification says), else ``~/.cache/pycudadrv``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pycudadrv")


def cache_dir_problem(raw: str) -> str | None:
    """Why ``PYCUDADRV_CACHE_DIR=raw`` cannot name a directory (only blanks;
    a ``~user`` that is no user), or None when it can."""
    if not raw.strip():
        return "only blanks"
    expanded = os.path.expanduser(raw)
    if expanded.startswith("~"):
        return f"{raw.split(os.sep, 1)[0]!r} is not a user's home directory"
    return None


def cache_dir() -> str | None:
    """Directory of the compile cache: ``$PYCUDADRV_CACHE_DIR`` (a leading
    ``~`` or ``~user`` expanded), else :func:`default_cache_dir`; None when
    ``PYCUDADRV_CACHE=0`` disables it. A ``PYCUDADRV_CACHE_DIR`` of only
    blanks, or whose ``~user`` is no user, warns once (``RuntimeWarning``) and
    the default is used: never a directory named ``"   "`` or ``./~user``.
    A relative one is resolved against the working directory once, at its
    first use, and warns once (``RuntimeWarning``) naming the absolute
    directory: later calls use that one, wherever the process has moved."""
    if not env_flag("PYCUDADRV_CACHE", True):
        return None
    raw = os.environ.get("PYCUDADRV_CACHE_DIR")
    if not raw:
        return default_cache_dir()
    why = cache_dir_problem(raw)
    if why is not None:
        default = default_cache_dir()
        if ("PYCUDADRV_CACHE_DIR", raw) not in _warned:
            _warned.add(("PYCUDADRV_CACHE_DIR", raw))
            warnings.warn(f"PYCUDADRV_CACHE_DIR={raw!r} is not a directory name ({why}); using the default "
                          f"{default!r}", RuntimeWarning, stacklevel=3)
        return default
    path = os.path.expanduser(raw)
    if os.path.isabs(path):
        return path
    with _relative_lock:
        resolved = _relative_dirs.get(raw)
        if resolved is None:
            resolved = _relative_dirs[raw] = os.path.abspath(path)
            warnings.warn(f"PYCUDADRV_CACHE_DIR={raw!r} is a relative path: the compile cache uses {resolved!r} "
                          "(resolved against the working directory at its first use, and kept for the rest of "
                          "this process); set an absolute path to choose the directory", RuntimeWarning,
                          stacklevel=3)
    return resolved


def cache_max_bytes() -> int:
    """Size limit of the cache directory in bytes: ``$PYCUDADRV_CACHE_MAX_BYTES``
    (an integer >= 0; 0 keeps nothing, and a limit below one entry's size
    keeps none of that size), else 1 GiB. Another value warns once and gives 1 GiB."""
    v = env_int("PYCUDADRV_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES, minimum=0)
    return DEFAULT_MAX_BYTES if v is None else v


def _entries(d: str) -> list[str]:
    return glob.glob(os.path.join(glob.escape(d), "*" + SUFFIX))


def clear_cache() -> int:
    """Delete every cached compilation and link; returns how many files were removed."""
    d = cache_dir()
    n = 0
    if d and os.path.isdir(d):
        for f in _entries(d):
            try:
                os.remove(f)
                n += 1
            except OSError:
                pass
    return n


def cache_size() -> tuple[int, int]:
    """``(entries, bytes)`` held in the cache directory now (0, 0 when it is off or absent)."""
    d = cache_dir()
    n = total = 0
    if d and os.path.isdir(d):
        for f in _entries(d):
            try:
                st = os.stat(f)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):   # a directory of an entry's name is no entry
                total += st.st_size
                n += 1
    return n, total


def library_identity(path: str | None) -> list[Any]:
    """What tells one build of a library from another: its resolved path, size
    and modification time (two NVRTC 13.5 builds report the same version)."""
    if not path:
        return ["?"]
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        return [real, st.st_size, st.st_mtime_ns]
    except OSError:
        return [real]


def loaded_path(stem: str) -> str | None:
    """Path of the mapped library whose file name starts with ``stem`` (for one loaded by soname)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith(stem + ".so"):
                    return path
    except OSError:
        pass
    return None


def key(*parts: bytes) -> str:
    """SHA-256 (hex) of ``parts``, each length-prefixed (so no two lists of parts collide)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.hexdigest()


def _warn_once(d: str, what: str, err: OSError) -> None:
    if (d, what) in _warned:
        return
    _warned.add((d, what))
    src = "PYCUDADRV_CACHE_DIR" if os.environ.get("PYCUDADRV_CACHE_DIR") else "the default location"
    warnings.warn(f"pycudadrv: the compile cache directory {d!r} (from {src}) is not usable: cannot {what} "
                  f"({err.strerror or err}); compiling without the disk cache. Point PYCUDADRV_CACHE_DIR at a "
                  "writable directory, or set PYCUDADRV_CACHE=0 to turn the cache off.", RuntimeWarning,
                  stacklevel=4)


def _warn_entry(path: str, err: OSError) -> None:
    if (path, "entry") in _warned:
        return
    _warned.add((path, "entry"))
    warnings.warn(f"pycudadrv: the compile cache entry {path!r} is not a regular file, so this result is not "
                  f"cached ({err.strerror or err}); the rest of the cache works. Remove it to cache the result "
                  "again.", RuntimeWarning, stacklevel=4)


def _touch(path: str, st: os.stat_result) -> None:
    try:  # the access time is what eviction reads: set it, whatever the mount's atime policy
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
    except OSError:
        pass


def read(k: str) -> tuple[dict[str, Any], bytes] | None:
    """``(header, image)`` of entry ``k``, or None when it is absent, not a
    regular file, too large, corrupt or truncated, or holds another key (an
    entry copied under this one's name, or written before entries recorded
    their key). A hit marks the entry as used; an entry over
    :func:`cache_max_bytes` is removed instead of read."""
    d = cache_dir()
    if not d:
        return None
    path = os.path.join(d, k + SUFFIX)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _READ_LIMIT:
            return None  # a FIFO, a device, a directory, or absurdly large: never read it
        if st.st_size > cache_max_bytes():   # the limit went down since it was written: it goes now
            os.remove(path)
            return None
        with open(path, "rb") as f:
            data = f.read(_READ_LIMIT + 1)
    except OSError:
        return None
    if len(data) < len(MAGIC) + 36 or not data.startswith(MAGIC):
        return None
    digest, body = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if hashlib.sha256(body).digest() != digest:
        return None  # truncated or corrupt: compile again
    (n,) = struct.unpack("<I", body[:4])
    try:
        meta = json.loads(body[4:4 + n])
    except ValueError:
        return None
    image = body[4 + n:]
    if not isinstance(meta, dict) or len(image) != meta.get("image_bytes"):
        return None
    if meta.get("key") != k:
        return None  # another entry's result under this name: as good as corrupt, compile again
    _touch(path, st)
    return meta, image


def write(k: str, meta: dict[str, Any], image: bytes) -> None:
    """Store entry ``k`` (atomically; ``k`` itself goes into the header, for
    :func:`read` to check), then evict the least recently used entries
    beyond :func:`cache_max_bytes`. An unusable directory warns once."""
    d = cache_dir()
    if not d:
        return
    limit = cache_max_bytes()
    body_meta = json.dumps(dict(meta, image_bytes=len(image), key=k)).encode()
    body = struct.pack("<I", len(body_meta)) + body_meta + image
    blob = MAGIC + hashlib.sha256(body).digest() + body
    if len(blob) > limit:   # it would be evicted at once: not written, and the others still fit the limit
        if os.path.isdir(d):
            _evict(d, limit, keep=None)
        return
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        _warn_once(d, "create it", e)
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=SUFFIX)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        path = os.path.join(d, k + SUFFIX)
        try:
            os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
        except OSError as e:
            if os.path.lexists(path) and not os.path.isfile(path):
                _warn_entry(path, e)   # this one entry is blocked (a directory of that name), not the cache
                return
            raise
        tmp = None
    except OSError as e:
        _warn_once(d, "write to it", e)
        return
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
    _evict(d, limit, keep=k + SUFFIX)


def store(k: str, obj: Any) -> None:
    """Write an ObjectCode as entry ``k``: its fields (all but ``image`` and
    ``from_cache``) in the JSON header, the image as the payload."""
    meta = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name not in ("image", "from_cache")}
    write(k, meta, obj.image)


def fetch(k: str, cls: type[T]) -> T | None:
    """The ObjectCode (of class ``cls``) stored as entry ``k`` (``from_cache``
    True), or None when absent, damaged or written in another layout."""
    entry = read(k)
    if entry is None:
        return None
    meta, image = entry
    from pycudadrv._signature import ParamKind

    try:
        decls = meta.get("source_decls")
        if decls is not None:  # JSON made the (kind, size, align, const) tuples lists and the kinds ints
            decls = {str(n): [(ParamKind(p[0]), int(p[1]), int(p[2]), None if p[3] is None else bool(p[3]))
                              if p else None for p in ps] for n, ps in decls.items()}
        lv = meta.get("linker_version")
        return cls(image=image, target=str(meta["target"]), arch=str(meta["arch"]),  # type: ignore[call-arg]
                   ptx=meta.get("ptx"), log=str(meta.get("log", "")), options=tuple(meta["options"]),
                   lowered_names=dict(meta.get("lowered_names") or {}),
                   nvrtc_version=(int(meta["nvrtc_version"][0]), int(meta["nvrtc_version"][1])), from_cache=True,
                   source_decls=decls, archs=tuple(meta.get("archs") or ()), name=str(meta.get("name", "kernel.cu")),
                   linker_version=(int(lv[0]), int(lv[1])) if lv else None)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None


def _evict(d: str, limit: int, keep: str | None) -> None:
    """Remove the least recently used entries until the directory holds at most
    ``limit`` bytes; ``keep`` (the entry just written) goes last."""
    files = []
    total = 0
    now = time.time()
    try:
        names = os.listdir(d)
    except OSError:
        return
    for name in names:
        path = os.path.join(d, name)
        if not name.endswith(SUFFIX):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if name.startswith(".tmp-"):
            if now - st.st_mtime > _STALE_TMP_S:
                try:
                    os.remove(path)
                except OSError:
                    pass
            continue
        total += st.st_size
        files.append((st.st_atime_ns, name != keep, name, st.st_size))
    if total <= limit:
        return
    files.sort(key=lambda t: (not t[1], t[0]))  # oldest use first; the entry just written last
    for _atime, _other, name, size in files:
        if total <= limit:
            break
        try:
            os.remove(os.path.join(d, name))
            total -= size
        except OSError:
            pass
