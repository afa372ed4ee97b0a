"""Where datasets, outputs and stored logs live when Cordon runs on several hosts: in the database.

Why the database: several hosts need one place for files, and the one shared thing every Cordon
host already has is the PostgreSQL server (runs, workers and leases live there). An object store
(S3, MinIO) would be a new service for the operator to run and secure; NFS is the shared
filesystem the multi-host design rules out. One host keeps FileSystemStorage (CORDON_STORAGE).

How: a file is a StoredFile row (name, size, sha256) and StoredChunk rows of CHUNK_BYTES each, the
last one shorter. Fixed-size chunks turn an offset into a chunk index, so a reader seeks without
reading what comes before, and holds one chunk in memory at a time; a writer streams the same way.
The row and its chunks are written in one transaction: a writer that dies mid-upload (a killed
host, a client gone) leaves no row and no chunk visible to anyone, and no name taken.

Checksums: the sha256 is computed while writing, and checked by a reader that reads the whole
file from the start (`StorageIntegrityError` otherwise, as for a missing or misshapen chunk).
`fetch_verified` and `save_verified` check a record's own sha256 with any storage backend.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from django.core.files.base import File
from django.core.files.storage import Storage
from django.db import IntegrityError, transaction
from django.utils.deconstruct import deconstructible

from playground.models import StoredChunk, StoredFile

if TYPE_CHECKING:
    _BytesFile = File[bytes]
else:
    _BytesFile = File  # django-stubs makes File generic; Django's own class is not subscriptable

CHUNK_BYTES = 1 << 20
NAME_MAX_LENGTH = StoredFile._meta.get_field("name").max_length or 255
_WRITE_MODE_LETTERS = frozenset("wax+")


class StorageIntegrityError(OSError):
    """A stored file's content does not match its recorded sha256, or part of it is missing.

    Raised with one message (no extra constructor arguments) so that it pickles across Celery."""


def _integrity_error(name: str, reason: str) -> StorageIntegrityError:
    return StorageIntegrityError(f"stored file {name!r} failed its integrity check: {reason}")


def sha256_of(path: Path | str) -> str:
    """The hex sha256 of a local file, read in chunks so a large output never sits in memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def _rechunked(content: File[Any]) -> Iterator[bytes]:
    """The content as blocks of exactly CHUNK_BYTES (the last shorter): chunk i starts at i * CHUNK_BYTES.

    A source's own chunks may be shorter (a socket, an upload handler); the index arithmetic of
    readers depends on every chunk but the last being full. Text is stored as UTF-8."""
    pending = bytearray()
    for piece in content.chunks(CHUNK_BYTES):
        if not pending and len(piece) == CHUNK_BYTES and isinstance(piece, bytes):
            yield piece  # the common case: the source's chunks are already the right size
            continue
        pending += piece.encode() if isinstance(piece, str) else piece
        while len(pending) >= CHUNK_BYTES:
            yield bytes(pending[:CHUNK_BYTES])
            del pending[:CHUNK_BYTES]
    if pending:
        yield bytes(pending)


class _ForwardHash:
    """The sha256 of the bytes read forward from offset 0: a read anywhere else voids it (it cannot
    vouch for the whole), until a restart (a seek back to 0)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._hasher: Any = hashlib.sha256()
        self.hashed = 0

    def feed(self, position: int, data: bytes | memoryview) -> None:
        """`data`, read at `position`: hashed if it continues what was hashed, else the hash is void."""
        if self._hasher is not None and position == self.hashed:
            self._hasher.update(data)
            self.hashed += len(data)
        else:
            self._hasher = None

    def hexdigest(self) -> str | None:
        return None if self._hasher is None else str(self._hasher.hexdigest())


class _ChunkReader(io.RawIOBase):
    """Reads one StoredFile's chunks on demand, one chunk in memory, checking the sha256 on a full read.

    The hash covers the bytes handed out while reading forward from offset 0; a read anywhere else
    stops it (until a seek back to 0), since an out-of-order read cannot vouch for the whole file."""

    def __init__(self, record: StoredFile):
        super().__init__()
        self._file_id = record.pk
        self._name = record.name
        self._size = record.size
        self._sha256 = record.sha256
        self._pos = 0
        self._chunk_index = -1
        self._chunk = memoryview(b"")
        self._digest = _ForwardHash()
        self._verified = False

    @property
    def size(self) -> int:
        # File.size asks this first; its fallback would seek to the end and back, which stops the hash.
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._refuse_if_closed()
        bases = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}
        if whence not in bases:
            raise ValueError(f"invalid whence {whence}")
        target = bases[whence] + offset
        if target < 0:
            raise ValueError(f"negative seek position {target}")
        if target == 0 and not self._verified:
            self._digest.restart()
        self._pos = target
        return target

    def readinto(self, buffer: Any) -> int:
        self._refuse_if_closed()
        out = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(out) and self._pos < self._size:
            index, start = divmod(self._pos, CHUNK_BYTES)
            piece = self._load(index)[start : start + len(out) - filled]
            out[filled : filled + len(piece)] = piece
            self._digest.feed(self._pos, piece)
            self._pos += len(piece)
            filled += len(piece)
        self._check_if_complete()
        return filled

    def readall(self) -> bytes:
        # RawIOBase's default reads 8 KiB at a time; a whole-file read goes a chunk at a time instead.
        parts = []
        while block := self.read(CHUNK_BYTES):
            parts.append(block)
        return b"".join(parts)

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise ValueError(f"I/O operation on closed stored file {self._name!r}")

    def _load(self, index: int) -> memoryview:
        if index != self._chunk_index:
            self._chunk_index, self._chunk = -1, memoryview(b"")  # release the previous chunk first
            data = StoredChunk.objects.filter(file_id=self._file_id, index=index).values_list("data", flat=True).first()
            if data is None:
                raise _integrity_error(self._name, f"chunk {index} is missing")
            expected = min(CHUNK_BYTES, self._size - index * CHUNK_BYTES)
            if len(data) != expected:
                raise _integrity_error(self._name, f"chunk {index} holds {len(data)} bytes, not {expected}")
            self._chunk_index, self._chunk = index, memoryview(data)
        return self._chunk

    def _check_if_complete(self) -> None:
        if self._verified or self._digest.hashed != self._size:
            return
        actual = self._digest.hexdigest()
        if actual is None:  # the bytes were not all read forward from 0: nothing to vouch for
            return
        if actual != self._sha256:
            raise _integrity_error(self._name, f"sha256 {actual}, recorded {self._sha256}")
        self._verified = True


class DatabaseFile(_BytesFile):
    """A read-only stored file: `read`, `seek`, `tell`, `chunks` stream from the database."""

    def __init__(self, record: StoredFile):
        self._record = record
        super().__init__(_reader(record), name=record.name)
        self.mode = "rb"

    def open(self, mode: str | None = None, *args: Any, **kwargs: Any) -> DatabaseFile:
        """Reopen from the start (Django's File.open would look for `name` on the local disk)."""
        _refuse_write_mode(mode or "rb")
        if self.closed:
            self.file = _reader(self._record)
        else:
            self.seek(0)
        return self


def _reader(record: StoredFile) -> IO[bytes]:
    # A RawIOBase has every method of IO[bytes]; typeshed just does not declare it one.
    return cast(IO[bytes], _ChunkReader(record))


def _refuse_write_mode(mode: str) -> None:
    if _WRITE_MODE_LETTERS & set(mode):
        raise ValueError(f"database storage files are written with save(), not opened with mode {mode!r}")


@deconstructible(path="playground.storage.DatabaseStorage")
class DatabaseStorage(Storage):
    """Django storage kept in the database every host shares (CORDON_STORAGE=database).

    No `path()`: Django's default raises NotImplementedError, which callers take to mean the
    content is not on the local disk (see fetch_verified)."""

    def _save(self, name: str, content: File[Any]) -> str:
        with transaction.atomic():
            record = self._claim_name(name)
            digest, size = hashlib.sha256(), 0
            for index, block in enumerate(_rechunked(content)):
                StoredChunk.objects.create(file=record, index=index, data=block)
                digest.update(block)
                size += len(block)
            record.size, record.sha256 = size, digest.hexdigest()
            record.save(update_fields=["size", "sha256"])
        return record.name

    def _claim_name(self, name: str) -> StoredFile:
        """Insert the row first, so a name taken by a concurrent writer is found before any content is read.

        Django's contract: a save never replaces a file, it picks another name (FileSystemStorage
        does the same on O_EXCL's FileExistsError). The savepoint keeps an outer transaction usable."""
        while True:
            try:
                with transaction.atomic():
                    return StoredFile.objects.create(name=name, size=0, sha256="")
            except IntegrityError:
                available = self.get_available_name(name)
                if available == name:
                    raise  # taken by a transaction this one cannot see (an outer snapshot): do not spin
                name = available

    def get_available_name(self, name: str, max_length: int | None = None) -> str:
        # The name column's length is a limit whatever the caller's field says.
        limit = NAME_MAX_LENGTH if max_length is None else min(max_length, NAME_MAX_LENGTH)
        return super().get_available_name(name, max_length=limit)

    def _open(self, name: str, mode: str = "rb") -> DatabaseFile:
        _refuse_write_mode(mode)
        return DatabaseFile(self._record(name))

    def _record(self, name: str) -> StoredFile:
        record = StoredFile.objects.filter(name=name).first()
        if record is None:
            raise FileNotFoundError(f"no stored file named {name!r}")
        return record

    def delete(self, name: str) -> None:
        # The chunks go with the row: Django deletes them with one DELETE statement, never loading them.
        StoredFile.objects.filter(name=name).delete()

    def exists(self, name: str) -> bool:
        return StoredFile.objects.filter(name=name).exists()

    def size(self, name: str) -> int:
        return self._record(name).size

    def listdir(self, path: str) -> tuple[list[str], list[str]]:
        """Directories are name prefixes split by "/"; an unknown directory lists as empty."""
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        directories: set[str] = set()
        files: list[str] = []
        names = StoredFile.objects.filter(name__startswith=prefix).values_list("name", flat=True)
        for name in names.iterator():
            # SQLite's LIKE ignores case: the filter narrows, this decides.
            if not name.startswith(prefix):
                continue
            head, slash, _rest = name[len(prefix) :].partition("/")
            if slash:
                directories.add(head)
            else:
                files.append(head)
        return sorted(directories), sorted(files)

    def get_created_time(self, name: str) -> datetime:
        return self._record(name).created_at

    def get_modified_time(self, name: str) -> datetime:
        return self.get_created_time(name)  # stored files are never modified in place

    def get_accessed_time(self, name: str) -> datetime:
        return self.get_created_time(name)  # reads are not recorded

    def url(self, name: str | None) -> str:
        raise NotImplementedError("database storage files have no URL: they are served through the API only")


def _local_path(storage: Storage, name: str) -> Path | None:
    try:
        return Path(storage.path(name))
    except NotImplementedError:
        return None


def fetch_verified(storage: Storage, name: str, sha256: str, dest: Path) -> Path:
    """A local file holding `name`'s content, its sha256 checked against the record's `sha256`.

    A local storage's own file is hashed in place and returned (no copy). Otherwise the content
    streams into `dest` (mode 0600; an existing file there is replaced, a link is not followed),
    which is removed again if the content does not match."""
    sha256 = sha256.lower()
    local = _local_path(storage, name)
    if local is not None:
        actual = sha256_of(local)
        if actual != sha256:
            raise _integrity_error(name, f"sha256 {actual}, expected {sha256}")
        return local
    try:
        actual = _stream_to(storage, name, dest)
    except BaseException:
        _unlink_quietly(dest)
        raise
    if actual != sha256:
        _unlink_quietly(dest)
        raise _integrity_error(name, f"sha256 {actual}, expected {sha256}")
    return dest


def _stream_to(storage: Storage, name: str, dest: Path) -> str:
    _unlink_quietly(dest)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    digest = hashlib.sha256()
    with os.fdopen(fd, "wb") as out, storage.open(name, "rb") as source:
        for block in source.chunks(CHUNK_BYTES):
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class _HashingFile(_BytesFile):
    """Hashes what a storage reads from a source, so that the stored bytes are hashed once, as they pass.

    A storage that seeks back to 0 (File.chunks does) restarts the hash; a read that does not
    continue where the hashed bytes end makes `hexdigest` None, and the caller hashes what was
    stored instead. (A source read from where it stood, not seekable, is hashed from there.)"""

    def __init__(self, source: IO[bytes], name: str):
        super().__init__(source, name=name)
        self._source = source
        self._digest = _ForwardHash()
        self._pos = 0

    def read(self, size: int | None = -1) -> bytes:
        data = self._source.read(-1 if size is None else size)
        self._digest.feed(self._pos, data)
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        position = self._source.seek(offset, whence)
        if position == 0:
            self._digest.restart()
        self._pos = position
        return position

    def hexdigest(self) -> str | None:
        return self._digest.hexdigest()


def save_verified(storage: Storage, name: str, source: Path | IO[bytes], sha256: str | None) -> str:
    """Save `source` under (about) `name` and return the stored name; the stored bytes are hashed as they stream.

    With `sha256` given, content that does not match it is deleted again and StorageIntegrityError
    raised: a dataset whose record says one thing and whose stored bytes another is never kept."""
    if isinstance(source, Path):
        with open(source, "rb") as handle:
            return _save_hashed(storage, name, handle, sha256)
    return _save_hashed(storage, name, source, sha256)


def _save_hashed(storage: Storage, name: str, source: IO[bytes], sha256: str | None) -> str:
    wrapped = _HashingFile(source, name)
    stored = storage.save(name, wrapped)
    actual = wrapped.hexdigest() or _stored_sha256(storage, stored)
    if sha256 is not None and actual != sha256.lower():
        storage.delete(stored)
        raise _integrity_error(stored, f"sha256 {actual}, expected {sha256}")
    return stored


def _stored_sha256(storage: Storage, name: str) -> str:
    """The sha256 of what a storage holds under `name`, read back (when the save skipped around its source)."""
    digest = hashlib.sha256()
    with storage.open(name, "rb") as stored:
        for block in stored.chunks(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def delete_with_folders(storage: Storage, name: str) -> None:
    """Delete a stored file and, in a local storage, the folders it leaves empty (a run's `logs/<id>/`,
    a check run's `grading/<result>/try-N/`): names are folders on a disk, not in the database."""
    storage.delete(name)
    local = _local_path(storage, name)
    if local is None:
        return
    root = Path(storage.path(""))
    folder = local.parent
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone): the folders above are not empty either
            return
        folder = folder.parent
