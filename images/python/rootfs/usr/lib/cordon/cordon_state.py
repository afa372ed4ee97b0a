"""The state file a notebook cell leaves for the next (format 2): every value through one pickler
whose memo spans them all, so what two names share stays shared (a list both hold, an array and a
view of it, a data frame and the array it was made from), yet each value is a pickle of its own in
the file, so one that cannot be saved or restored costs only itself and what shares with it.

    magic    b"CORDON-STATE 2\\n" (15 bytes)
    length   the header's length in bytes, 8 bytes unsigned little-endian
    header   JSON: {"entries": [{"name": "df", "pickle": 812, "buffers": [40000, 4000], "lazy": [0]},
                                 ...],
                    "modules": {"pd": "pandas"}, "kernel": {...the cell program's JSON facts...}}
    blobs    for each entry, in order: its pickle (one dump of the shared pickler), then its
             out-of-band buffers (arrays' and bytearrays' memory, written without a copy); a
             "lazy" buffer is an array's memory, read straight into the array it becomes

Loading reads the entries in order with one unpickler, so its memo grows as the pickler's did. When
an entry fails to load, the memo slots it would have filled are marked lost (counted by reading its
opcodes), and an entry that refers to a lost slot is not loaded but listed with the reason: nothing
comes back wrong, only missing. An array comes back owning its memory, as it was (read into
memory numpy allocated for it), and a view as a view of it: `v.base is x` holds again. Imported by
pickles themselves for the helpers that rebuild an array (_owned), a view (_view) and a buffer
(_same), so it must stay importable under this name.
"""

import io
import os
import sys

TYPE_CHECKING = False  # typing itself is not imported: every cell pays for what this imports
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

    Json = dict[str, Any]

MAGIC = b"CORDON-STATE 2\n"
HEADER_MAX_BYTES = 64 << 20
# Exact types the standard pickler saves as cloudpickle would: cloudpickle costs about 10 ms to
# import (more than a small state's whole save), so a state of nothing else never imports it.
PLAIN_TYPES = frozenset({int, float, complex, bool, str, bytes, type(None)})
_LOST = object()  # a memo slot whose value was not restored: never reaches a value (see Reader)


class DamagedState(Exception):
    """The state file is not one a cell program wrote, or ends early."""


# --- writing -------------------------------------------------------------------------------------


class Snapshot:
    """Entries pickled through one shared memo, their blobs in order, and what could not be saved."""

    def __init__(self) -> None:
        self.entries: list[Json] = []
        self.blobs: list[memoryview] = []
        self.failed: dict[str, str] = {}  # name -> why it could not be pickled

    def total_bytes(self, header: "Json") -> int:
        return len(MAGIC) + 8 + len(_header_bytes(header)) + sum(blob.nbytes for blob in self.blobs)


def snapshot(items: "list[tuple[str, object]]", make_pickler: "Callable[..., Any]") -> Snapshot:
    """Pickle each (name, value) through one pickler. A value that fails is probed alone, with the
    rest after it, to find every value that fails; then all but those are pickled again, shared: a
    failed dump leaves the memo holding objects whose pickles were thrown away."""
    failed: dict[str, str] = {}
    for _ in range(len(items) + 1):
        kept = [(name, value) for name, value in items if name not in failed]
        result, stopped_at = _pickle_shared(kept, make_pickler)
        if stopped_at is None:
            result.failed = failed
            return result
        name, why = stopped_at
        failed[name] = why
        after = kept[[n for n, _ in kept].index(name) + 1 :]
        failed.update(_probe(after, make_pickler))
    raise AssertionError("unreachable: each pass removes a name")


def _pickle_shared(
    items: "list[tuple[str, object]]", make_pickler: "Callable[..., Any]"
) -> "tuple[Snapshot, tuple[str, str] | None]":
    result = Snapshot()
    out = io.BytesIO()
    buffers: list[Any] = []
    pickler = make_pickler(out, buffers.append)
    starts = []
    for name, value in items:
        start, first_buffer = out.tell(), len(buffers)
        try:
            pickler.dump(value)
        except Exception as exc:
            return result, (name, "cannot be pickled: " + words(exc))
        starts.append((name, start, out.tell(), first_buffer, len(buffers)))
    data = out.getbuffer()
    raw = [buffer.raw() for buffer in buffers]
    for name, start, end, first, last in starts:
        entry: Json = {"name": name, "pickle": end - start, "buffers": [b.nbytes for b in raw[first:last]]}
        lazy = [n for n, buffer in enumerate(buffers[first:last]) if id(buffer) in pickler.lazy]
        if lazy:
            entry["lazy"] = lazy
        result.entries.append(entry)
        result.blobs.append(data[start:end])
        result.blobs.extend(raw[first:last])
    return result, None


def _probe(items: "list[tuple[str, object]]", make_pickler: "Callable[..., Any]") -> "dict[str, str]":
    failed = {}
    for name, value in items:
        try:
            make_pickler(io.BytesIO(), lambda _buffer: None).dump(value)
        except Exception as exc:
            failed[name] = "cannot be pickled: " + words(exc)
    return failed


def header_and_blobs(snap: Snapshot, modules: "dict[str, str]", kernel: "Json") -> "tuple[Json, list[memoryview]]":
    return {"entries": snap.entries, "modules": modules, "kernel": kernel}, snap.blobs


def pieces(header: "Json", blobs: "list[memoryview]") -> "list[Any]":
    encoded = _header_bytes(header)
    return [MAGIC, len(encoded).to_bytes(8, "little"), encoded, *blobs]


def _header_bytes(header: "Json") -> bytes:
    import json

    return json.dumps(header, separators=(",", ":")).encode()


def make_pickler_class(all_plain: bool, live: "Callable[[type], type] | None" = None) -> "Any":
    """The pickler: the standard one for a state of plain values only, else cloudpickle's (as
    `live` adapts it: functions the cells defined keep the live namespace as their globals); both
    keep views of an array as views and large buffers out of band."""
    import pickle

    base: Any = pickle.Pickler
    if not all_plain:
        import cloudpickle  # type: ignore[import-not-found, unused-ignore]

        base = cloudpickle.CloudPickler
        if live is not None:
            base = live(base)

    class StatePickler(base):  # type: ignore[misc]
        def __init__(self, file: "Any", buffer_callback: "Callable[..., Any]") -> None:
            super().__init__(file, protocol=5, buffer_callback=buffer_callback)
            self.lazy: set[int] = set()  # the buffers that are an array's memory, by id

        def reducer_override(self, obj: object) -> object:
            reduced = _reduce_memory(obj, self.lazy)
            if reduced is not None:
                return reduced
            parent = getattr(super(), "reducer_override", None)
            return NotImplemented if parent is None else parent(obj)

    return StatePickler


def _reduce_memory(obj: object, lazy: "set[int]") -> "tuple[Any, ...] | None":
    """An array of its own as its memory (out of band, read back straight into the array); a view
    of one as (that array, where in it); a bytearray or a memoryview as its memory. Anything else:
    None (pickled as usual)."""
    import pickle

    kind = type(obj)
    if kind is bytearray or (kind is memoryview and obj.c_contiguous and not obj.readonly):  # type: ignore[attr-defined]
        return _same, (pickle.PickleBuffer(obj),)  # type: ignore[arg-type]
    numpy = sys.modules.get("numpy")
    if numpy is None or kind is not numpy.ndarray or obj.dtype.hasobject:  # type: ignore[attr-defined]
        return None
    array: Any = obj
    if array.base is None and array.flags.owndata:
        if not (array.flags.writeable and (array.flags.c_contiguous or array.flags.f_contiguous)):
            return None  # numpy's own reduction
        memory = pickle.PickleBuffer(_raw(array))
        lazy.add(id(memory))
        order = "F" if array.flags.f_contiguous and not array.flags.c_contiguous else "C"
        return _owned, (memory, array.dtype, array.shape, order)
    return _reduce_view(numpy, array)


def _reduce_view(numpy: "Any", array: "Any") -> "tuple[Any, ...] | None":
    if array.flags.owndata:
        return None  # numpy's own reduction
    root = array.base
    while type(root) is numpy.ndarray and not root.flags.owndata and root.base is not None:
        root = root.base
    if type(root) is memoryview and isinstance(root.obj, (bytes, bytearray)) and root.c_contiguous:
        whole = memoryview(root.obj)
        if root.nbytes == whole.nbytes and _address(numpy, root) == _address(numpy, whole):
            root = root.obj  # numpy.frombuffer's wrapper of a buffer: the buffer itself is shared
    if type(root) is numpy.ndarray:
        if not root.flags.owndata or root.dtype.hasobject:
            return None
    elif not (type(root) in (bytes, bytearray) or (type(root) is memoryview and root.c_contiguous)):
        return None  # memory of another owner (a map, a foreign exporter): saved as a copy
    offset = array.__array_interface__["data"][0] - _address(numpy, root)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a broadcast view warns when its flag is read
        writeable = bool(array.flags.writeable)
    return _view, (root, offset, array.shape, array.strides, array.dtype, writeable)


def _raw(array: "Any") -> "Any":
    """A contiguous array's memory as bytes (a uint8 view, whatever its dtype: datetime64 too)."""
    import numpy

    flat = array.T if array.flags.f_contiguous and not array.flags.c_contiguous else array
    return flat.reshape(-1).view(numpy.uint8)


def _address(numpy: "Any", memory: object) -> int:
    if type(memory) is numpy.ndarray:
        return int(memory.__array_interface__["data"][0])
    return int(numpy.frombuffer(memory, numpy.uint8).__array_interface__["data"][0])


def _owned(memory: object, dtype: "Any", shape: "Any", order: str) -> "Any":
    """An array owning its memory, filled from the state (a pickle's reducer): read straight into
    it when the loader left the read to it, else copied from the buffer it read."""
    import numpy

    array = numpy.empty(shape, dtype, order=order)  # type: ignore[call-overload]
    raw = _raw(array)
    if isinstance(memory, _Pending):
        memory.read_into(raw)
    else:
        raw[:] = numpy.frombuffer(memory, numpy.uint8)  # type: ignore[call-overload]
    return array


def _view(root: object, offset: int, shape: "Any", strides: "Any", dtype: "Any", writeable: bool) -> "Any":
    """A view of `root`'s memory, as the pickled array was of its root's (a pickle's reducer)."""
    import numpy

    buffer = _raw(root) if type(root) is numpy.ndarray else root  # any dtype's memory, as bytes
    view = numpy.ndarray(shape, dtype, buffer=buffer, offset=offset, strides=strides)  # type: ignore[arg-type]
    if not writeable:
        view.flags.writeable = False
    return view


def _same(buffer: object) -> object:
    """The buffer the loader gave, as it is: memory the next cell uses without a copy."""
    return buffer.read() if isinstance(buffer, _Pending) else buffer


class _Pending:
    """An array's memory in the state file, not read yet: _owned reads it into the array."""

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd, self.offset, self.length = fd, offset, length

    def read_into(self, target: "Any") -> None:
        view, done = memoryview(target).cast("B"), 0
        if view.nbytes != self.length:
            raise DamagedState("an array's memory is not the size its pickle says")
        while done < self.length:
            got = os.preadv(self.fd, [view[done:]], self.offset + done)
            if not got:
                raise DamagedState("it ends early")
            done += got

    def read(self) -> bytearray:
        buffer = bytearray(self.length)
        self.read_into(buffer)
        return buffer


# --- reading -------------------------------------------------------------------------------------


class Reader:
    """The entries of a state file, loaded in order through one unpickler (see the module's
    docstring for what happens when one fails)."""

    def __init__(self, file: "io.FileIO", size: int) -> None:
        self.file, self.size = file, size
        self.header = _read_header(file, size)
        self.segment = _Segment()
        self.buffers = _Buffers()
        self.unpickler = self._unpickler([])
        self.pickles: list[bytearray] = []  # kept only to count memo slots once one has failed
        self.slot = 0  # the memo slot the next entry's first object takes (known once one failed)
        self.lost: list[tuple[int, int, str]] = []  # (first, end, name) of slots not restored

    def entries(self) -> "Iterator[tuple[Json, object, str | None]]":
        """(entry, value, None) or (entry, None, why not restored), for each entry in order.
        DamagedState ends it (the caller lists what was left); MemoryError propagates."""
        for entry in self.header["entries"]:
            pickle_bytes = _read_exact(self.file, entry["pickle"], self.size)
            lazy = set(entry.get("lazy", ()))
            buffers: list[object] = []
            for number, length in enumerate(entry["buffers"]):
                if number in lazy:  # read by _owned, into its array; skipped here
                    position = self.file.tell()
                    if length > self.size - position:
                        raise DamagedState("it ends early")
                    buffers.append(_Pending(self.file.fileno(), position, length))
                    self.file.seek(position + length)
                else:
                    buffers.append(_read_exact(self.file, length, self.size))
            if self.lost:
                shared = self._shares_lost(pickle_bytes)
                if shared is not None:
                    self._lose(entry["name"], pickle_bytes)
                    yield entry, None, f"it shares a value with `{shared}`, which was not restored"
                    continue
            self.segment.current = io.BytesIO(pickle_bytes)
            self.buffers.current = iter(buffers)
            try:
                value = self.unpickler.load()
            except MemoryError:
                raise
            except Exception as exc:
                self._lose(entry["name"], pickle_bytes)
                yield entry, None, words(exc)
                continue
            if self.lost:
                self.slot += _memo_slots(pickle_bytes)[0]
            else:
                self.pickles.append(pickle_bytes)
            yield entry, value, None

    def _unpickler(self, memo: "list[object]") -> "Any":
        """An unpickler whose memo holds `memo`, slot by slot. Setting Unpickler.memo does not
        advance the count MEMOIZE stores at (CPython 3.11), so the slots are filled by loading a
        pickle that memoizes each one, handed over as a persistent id."""
        import pickle

        class Restoring(pickle.Unpickler):
            replaying: "list[object] | None" = memo

            def persistent_load(self, pid: object) -> object:
                if self.replaying is None or not isinstance(pid, int):
                    raise pickle.UnpicklingError("a persistent id in a state")
                return self.replaying[pid]

        # The user's own state, loaded in the user's own sandbox.
        unpickler = Restoring(self.segment, buffers=self.buffers)
        if memo:
            replay = b"".join(b"J" + slot.to_bytes(4, "little", signed=True) + b"Q\x940" for slot in range(len(memo)))
            self.segment.current = io.BytesIO(b"\x80\x05" + replay + b"N.")
            unpickler.load()
        unpickler.replaying = None
        return unpickler

    def _lose(self, name: str, pickle_bytes: bytearray) -> None:
        """The entry's memo slots are lost: a new unpickler holds every slot before them as loaded
        and these as _LOST, so the next entry's objects land in the slots the pickler gave them."""
        if not self.lost:
            self.slot = sum(_memo_slots(done)[0] for done in self.pickles)
            self.pickles.clear()
        count = _memo_slots(pickle_bytes)[0]
        self.lost.append((self.slot, self.slot + count, name))
        loaded = self.unpickler.memo.copy()
        memo = [loaded.get(slot, _LOST) for slot in range(self.slot)] + [_LOST] * count
        self.slot += count
        self.unpickler = self._unpickler(memo)

    def _shares_lost(self, pickle_bytes: bytearray) -> "str | None":
        for slot in _memo_slots(pickle_bytes)[1]:
            for first, end, name in self.lost:
                if first <= slot < end:
                    return name
        return None


class _Segment:
    """The file the unpickler reads: the current entry's pickle."""

    def __init__(self) -> None:
        self.current = io.BytesIO()

    def read(self, size: int = -1) -> bytes:
        return self.current.read(size)

    def readinto(self, buffer: "Any") -> int:
        return self.current.readinto(buffer)

    def readline(self, size: int = -1) -> bytes:
        return self.current.readline(size)


class _Buffers:
    """The unpickler's out-of-band buffers: the current entry's."""

    def __init__(self) -> None:
        self.current: Iterator[object] = iter(())

    def __iter__(self) -> "_Buffers":
        return self

    def __next__(self) -> object:
        return next(self.current)


def _memo_slots(pickle_bytes: "Any") -> "tuple[int, list[int]]":
    """How many memo slots a pickle fills (MEMOIZE), and the slots it reads (GET and its kin)."""
    import pickletools

    filled, read = 0, []
    for opcode, arg, _ in pickletools.genops(bytes(pickle_bytes)):
        if opcode.name == "MEMOIZE":
            filled += 1
        elif opcode.name in ("GET", "BINGET", "LONG_BINGET"):
            read.append(int(arg))  # type: ignore[arg-type]
    return filled, read


def _read_header(file: "io.FileIO", size: int) -> "Json":
    import json

    if bytes(_read_exact(file, len(MAGIC), size)) != MAGIC:
        raise DamagedState("it is not a Cordon state of this version")
    length = int.from_bytes(_read_exact(file, 8, size), "little")
    if length > HEADER_MAX_BYTES:
        raise DamagedState("its header is too long")
    try:
        header = json.loads(_read_exact(file, length, size))
    except ValueError:
        raise DamagedState("its header is not JSON") from None
    if not _header_is_valid(header):
        raise DamagedState("its header is not in the expected shape")
    return header  # type: ignore[no-any-return]


def _header_is_valid(header: object) -> bool:
    if not isinstance(header, dict) or not isinstance(header.get("entries"), list):
        return False
    if not isinstance(header.get("kernel", {}), dict):
        return False
    modules = header.get("modules")
    if not isinstance(modules, dict) or not all(isinstance(m, str) for m in modules.values()):
        return False
    return all(_entry_is_valid(entry) for entry in header["entries"])


def _entry_is_valid(entry: object) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return False
    buffers, lazy = entry.get("buffers"), entry.get("lazy", [])
    if not isinstance(buffers, list) or not isinstance(lazy, list):
        return False
    counts = (entry.get("pickle"), *buffers, *lazy)
    return all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)


def _read_exact(file: "io.FileIO", length: int, size: int) -> bytearray:
    """Read into a buffer of its own: numpy uses a restored array's buffer as it is, no copy."""
    if length > size - file.tell():
        raise DamagedState("it ends early")
    buffer = bytearray(length)
    view, done = memoryview(buffer), 0
    while done < length:
        got = file.readinto(view[done:])
        if not got:
            raise DamagedState("it ends early")
        done += got
    return buffer


# --- writing the file ----------------------------------------------------------------------------


def write_all(fd: int, pieces: "Iterable[Any]") -> None:
    """Write bytes-like pieces (large arrays among them) without copying them."""
    views = [view for view in (memoryview(p).cast("B") for p in pieces) if view.nbytes]
    batch = os.sysconf("SC_IOV_MAX")
    while views:
        written = os.writev(fd, views[:batch])
        done = 0
        while done < len(views) and written >= views[done].nbytes:
            written -= views[done].nbytes
            done += 1
        del views[:done]
        if written:
            views[0] = views[0][written:]


# --- words ---------------------------------------------------------------------------------------


def words(exc: BaseException) -> str:
    """An exception on one short line: `ValueError: what it said`."""
    return short(" ".join(f"{type(exc).__name__}: {text(exc)}".split()))


def short(value: object, limit: int = 200) -> str:
    said = text(value)
    return said if len(said) <= limit else said[: limit - 1] + "…"


def text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:
        return object.__repr__(value)
