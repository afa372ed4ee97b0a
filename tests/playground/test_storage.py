"""The database storage (playground/storage.py) on SQLite and on a real PostgreSQL, and the verified fetch and save."""

from __future__ import annotations

import hashlib
import io
import os
import random
import signal
import stat
import subprocess
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

import pytest
from django.core.files.base import ContentFile, File
from django.core.files.storage import FileSystemStorage, Storage
from django.db import transaction

from playground.models import StoredChunk, StoredFile
from playground.storage import (
    CHUNK_BYTES,
    DatabaseStorage,
    StorageIntegrityError,
    delete_with_folders,
    fetch_verified,
    save_verified,
    sha256_of,
)
from runner.config import PROJECT_ROOT
from tests import pg
from tests.conftest import PYTHON, child_env

postgres_cluster = pg.postgres_cluster  # the fixture, found by pytest under this name
TWO_AND_A_HALF_MIB = CHUNK_BYTES * 5 // 2


def random_bytes(size: int, seed: int = 16) -> bytes:
    return random.Random(seed).randbytes(size)  # noqa: S311 (test data, reproducible)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FailingSource(io.RawIOBase):
    """A source that hands out `good_bytes` of data, then fails like a dropped upload."""

    def __init__(self, good_bytes: int):
        super().__init__()
        self.remaining = good_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.remaining <= 0:
            raise ConnectionResetError("the client went away")
        size = min(len(buffer), self.remaining)
        buffer[:size] = b"x" * size
        self.remaining -= size
        return size


class StreamSource(io.RawIOBase):
    """`size` bytes produced as they are read, never held whole (for the memory test)."""

    def __init__(self, size: int):
        super().__init__()
        self.remaining = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self.remaining)
        buffer[:size] = b"\x5a" * size
        self.remaining -= size
        return size


def raw_file(raw: io.RawIOBase) -> File[bytes]:
    return File(cast(IO[bytes], raw))  # a RawIOBase is a binary file; typeshed does not say so


@pytest.fixture
def storage() -> DatabaseStorage:
    return DatabaseStorage()


def corrupt_chunk(name: str, index: int) -> None:
    chunk = StoredChunk.objects.get(file__name=name, index=index)
    data = bytearray(chunk.data)
    data[1234] ^= 0xFF
    StoredChunk.objects.filter(pk=chunk.pk).update(data=bytes(data))


# --- DatabaseStorage on the test database -------------------------------------------------------


@pytest.mark.django_db
def test_a_multi_chunk_file_reads_back_whole_in_pieces_and_from_the_middle(storage):
    data = random_bytes(TWO_AND_A_HALF_MIB)
    name = storage.save("outputs/run-1/result.bin", ContentFile(data))

    record = StoredFile.objects.get(name=name)
    assert (record.size, record.sha256) == (len(data), sha256(data))
    assert sorted(StoredChunk.objects.filter(file=record).values_list("index", flat=True)) == [0, 1, 2]
    assert storage.size(name) == len(data)
    with storage.open(name) as handle:
        assert handle.size == len(data)
        assert handle.read() == data
    with storage.open(name) as handle:
        pieces = iter(lambda: handle.read(300_001), b"")
        assert b"".join(pieces) == data
    with storage.open(name) as handle:
        handle.seek(CHUNK_BYTES - 5)
        assert handle.read(10) == data[CHUNK_BYTES - 5 : CHUNK_BYTES + 5]
        assert handle.tell() == CHUNK_BYTES + 5
        handle.seek(-3, io.SEEK_END)
        assert handle.read() == data[-3:]
        assert b"".join(handle.chunks()) == data  # chunks() starts over from 0


@pytest.mark.django_db
def test_a_source_with_short_reads_is_stored_in_full_size_chunks(storage):
    data = random_bytes(CHUNK_BYTES + 10)
    name = storage.save("short-reads.bin", File(io.BufferedReader(io.BytesIO(data), buffer_size=4096)))
    sizes = StoredChunk.objects.filter(file__name=name).order_by("index").values_list("data", flat=True)
    assert [len(chunk) for chunk in sizes] == [CHUNK_BYTES, 10]
    with storage.open(name) as handle:
        assert handle.read() == data


@pytest.mark.django_db
def test_an_empty_file_is_stored_without_chunks_and_reads_as_empty(storage):
    name = storage.save("empty.txt", ContentFile(b""))
    assert StoredFile.objects.get(name=name).sha256 == sha256(b"")
    assert not StoredChunk.objects.filter(file__name=name).exists()
    with storage.open(name) as handle:
        assert handle.size == 0
        assert handle.read() == b""


@pytest.mark.django_db
def test_a_taken_name_gets_another_as_in_django_storage_contract(storage):
    first = storage.save("data.csv", ContentFile(b"first"))
    second = storage.save("data.csv", ContentFile(b"second"))
    assert first == "data.csv"
    assert second != first and second.startswith("data_") and second.endswith(".csv")
    assert storage.open(first).read() == b"first"
    assert storage.open(second).read() == b"second"


@pytest.mark.django_db
def test_delete_removes_the_file_and_its_chunks(storage):
    name = storage.save("gone.bin", ContentFile(random_bytes(TWO_AND_A_HALF_MIB)))
    assert storage.exists(name)
    storage.delete(name)
    assert not storage.exists(name)
    assert not StoredChunk.objects.exists()
    storage.delete(name)  # deleting what is not there is not an error, as with FileSystemStorage


@pytest.mark.django_db
def test_listdir_treats_slash_separated_prefixes_as_directories(storage):
    for name in ("runs/1/out.txt", "runs/1/log.txt", "runs/2/out.txt", "top.txt", "Runs/upper.txt"):
        storage.save(name, ContentFile(b"."))
    assert storage.listdir("") == (["Runs", "runs"], ["top.txt"])
    assert storage.listdir("runs") == (["1", "2"], [])
    assert storage.listdir("runs/1/") == ([], ["log.txt", "out.txt"])
    assert storage.listdir("nowhere") == ([], [])


@pytest.mark.django_db
def test_times_are_the_creation_time_and_there_is_no_url_or_local_path(storage):
    name = storage.save("times.txt", ContentFile(b"t"))
    created = StoredFile.objects.get(name=name).created_at
    assert storage.get_created_time(name) == storage.get_modified_time(name) == created
    assert storage.get_accessed_time(name) == created
    with pytest.raises(NotImplementedError, match="through the API"):
        storage.url(name)
    with pytest.raises(NotImplementedError):
        storage.path(name)


@pytest.mark.django_db
def test_missing_files_and_write_modes_are_refused(storage):
    with pytest.raises(FileNotFoundError):
        storage.open("missing.txt")
    with pytest.raises(FileNotFoundError):
        storage.size("missing.txt")
    name = storage.save("read-only.txt", ContentFile(b"r"))
    for mode in ("wb", "ab", "r+b", "xb"):
        with pytest.raises(ValueError, match="save"):
            storage.open(name, mode)


@pytest.mark.django_db
def test_a_flipped_byte_fails_a_full_read_naming_the_file(storage):
    data = random_bytes(TWO_AND_A_HALF_MIB)
    name = storage.save("flipped.bin", ContentFile(data))
    corrupt_chunk(name, 1)

    with storage.open(name) as handle, pytest.raises(StorageIntegrityError, match=r"flipped\.bin"):
        handle.read()
    with storage.open(name) as handle, pytest.raises(StorageIntegrityError):
        for _ in handle.chunks():
            pass
    # A read of part of the file cannot tell and does not claim to: it returns what is stored.
    with storage.open(name) as handle:
        handle.seek(10)
        assert handle.read(100) == data[10:110]


@pytest.mark.django_db
def test_a_missing_chunk_fails_any_read_that_reaches_it(storage):
    name = storage.save("holed.bin", ContentFile(random_bytes(TWO_AND_A_HALF_MIB)))
    StoredChunk.objects.filter(file__name=name, index=1).delete()
    with storage.open(name) as handle, pytest.raises(StorageIntegrityError, match="chunk 1 is missing"):
        handle.read()
    with storage.open(name) as handle:
        handle.seek(CHUNK_BYTES + 1)
        with pytest.raises(StorageIntegrityError):
            handle.read(1)


@pytest.mark.django_db(transaction=True)
def test_a_source_that_fails_halfway_leaves_no_file_and_no_chunk(storage):
    with pytest.raises(ConnectionResetError):
        storage.save("half.bin", raw_file(FailingSource(TWO_AND_A_HALF_MIB)))
    assert not StoredFile.objects.exists()
    assert not StoredChunk.objects.exists()
    assert storage.save("half.bin", ContentFile(b"whole")) == "half.bin"  # and the name was not taken


@pytest.mark.django_db(transaction=True)
def test_a_save_inside_an_outer_transaction_goes_with_it(storage):
    def save_then_fail() -> None:
        with transaction.atomic():
            storage.save("outer.bin", ContentFile(random_bytes(CHUNK_BYTES + 1)))
            raise RuntimeError("the caller's own work failed")

    with pytest.raises(RuntimeError):
        save_then_fail()
    assert not StoredFile.objects.exists()
    assert not StoredChunk.objects.exists()


@pytest.mark.django_db
def test_saving_and_reading_16_mib_holds_a_few_chunks_in_memory_not_the_file(storage):
    size = 16 * CHUNK_BYTES
    tracemalloc.start()
    try:
        name = storage.save("big.bin", raw_file(StreamSource(size)))
        _, save_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        with storage.open(name) as handle:
            read = sum(len(block) for block in handle.chunks(CHUNK_BYTES))
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read == size
    assert save_peak < 6 * CHUNK_BYTES
    assert read_peak < 6 * CHUNK_BYTES


# --- fetch_verified and save_verified, with either storage ---------------------------------------


@pytest.fixture(params=["filesystem", pytest.param("database", marks=pytest.mark.django_db)])
def any_storage(request, tmp_path) -> Iterator[Storage]:
    if request.param == "filesystem":
        yield FileSystemStorage(location=tmp_path / "media")
    else:
        yield DatabaseStorage()


def test_save_verified_keeps_content_whose_sha256_matches(any_storage, tmp_path):
    data = random_bytes(TWO_AND_A_HALF_MIB)
    source = tmp_path / "upload.bin"
    source.write_bytes(data)
    name = save_verified(any_storage, "datasets/upload.bin", source, sha256(data))
    assert any_storage.open(name).read() == data
    from_stream = save_verified(any_storage, "datasets/stream.bin", io.BytesIO(data), None)
    assert any_storage.open(from_stream).read() == data


def test_save_verified_deletes_content_whose_sha256_differs(any_storage):
    with pytest.raises(StorageIntegrityError, match=r"datasets/wrong\.bin"):
        save_verified(any_storage, "datasets/wrong.bin", io.BytesIO(b"not what was announced"), sha256(b"other"))
    assert not any_storage.exists("datasets/wrong.bin")
    assert any_storage.listdir("datasets") == ([], [])


def test_a_deleted_file_takes_the_folders_it_leaves_empty_with_it_and_no_more(any_storage):
    for name in ("logs/run/stdout.log", "logs/run/stderr.log", "logs/other/stdout.log"):
        any_storage.save(name, ContentFile(b"x"))
    delete_with_folders(any_storage, "logs/run/stdout.log")
    assert any_storage.listdir("logs") == (["other", "run"], [])
    delete_with_folders(any_storage, "logs/run/stderr.log")
    assert any_storage.listdir("logs") == (["other"], [])
    delete_with_folders(any_storage, "logs/other/stdout.log")
    assert any_storage.listdir("") == ([], [])
    if isinstance(any_storage, FileSystemStorage):
        assert Path(any_storage.location).is_dir()  # the storage's own root stays


def test_fetch_verified_gives_a_checked_local_file(any_storage, tmp_path):
    data = random_bytes(TWO_AND_A_HALF_MIB)
    name = any_storage.save("outputs/out.bin", ContentFile(data))
    dest = tmp_path / "fetched.bin"
    local = fetch_verified(any_storage, name, sha256(data), dest)
    assert local.read_bytes() == data
    if isinstance(any_storage, FileSystemStorage):
        assert local == Path(any_storage.path(name))  # hashed in place, not copied
        assert not dest.exists()
    else:
        assert local == dest
        assert stat.S_IMODE(dest.stat().st_mode) == 0o600


def test_fetch_verified_refuses_a_wrong_sha256_and_leaves_no_file(any_storage, tmp_path):
    name = any_storage.save("outputs/out.bin", ContentFile(b"content"))
    dest = tmp_path / "fetched.bin"
    with pytest.raises(StorageIntegrityError, match=r"outputs/out\.bin"):
        fetch_verified(any_storage, name, sha256(b"something else"), dest)
    assert not dest.exists()


@pytest.mark.django_db
def test_fetch_verified_refuses_a_corrupted_stored_chunk_and_leaves_no_file(storage, tmp_path):
    data = random_bytes(TWO_AND_A_HALF_MIB)
    name = storage.save("outputs/rotted.bin", ContentFile(data))
    corrupt_chunk(name, 2)
    dest = tmp_path / "fetched.bin"
    with pytest.raises(StorageIntegrityError):
        fetch_verified(storage, name, sha256(data), dest)
    assert not dest.exists()


def test_sha256_of_streams_a_local_file(tmp_path):
    path = tmp_path / "f.bin"
    data = random_bytes(CHUNK_BYTES * 2 + 7)
    path.write_bytes(data)
    assert sha256_of(path) == sha256(data)


# --- on a real PostgreSQL, in child processes (a Django of their own, CORDON_STORAGE=database) ----

PG_PRELUDE = """
import hashlib, os, random, sys, time
import django
django.setup()
from django.core.management import call_command
from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage
from playground.models import StoredChunk, StoredFile
from playground.storage import CHUNK_BYTES, DatabaseStorage, StorageIntegrityError, fetch_verified, save_verified
assert isinstance(default_storage, DatabaseStorage), type(default_storage)
"""

PG_CORE = """
call_command("migrate", verbosity=0)
data = random.Random(7).randbytes(CHUNK_BYTES * 5 // 2)
digest = hashlib.sha256(data).hexdigest()
name = default_storage.save("outputs/pg.bin", ContentFile(data))
assert StoredFile.objects.get(name=name).sha256 == digest
assert StoredChunk.objects.filter(file__name=name).count() == 3
with default_storage.open(name) as handle:
    assert handle.read() == data
    handle.seek(CHUNK_BYTES - 5)
    assert handle.read(10) == data[CHUNK_BYTES - 5 : CHUNK_BYTES + 5]
assert default_storage.listdir("outputs") == ([], ["pg.bin"])
dest = fetch_verified(default_storage, name, digest, __import__("pathlib").Path(sys.argv[1]) / "fetched.bin")
assert dest.read_bytes() == data
try:
    save_verified(default_storage, "outputs/wrong.bin", __import__("io").BytesIO(data), "0" * 64)
    raise AssertionError("a wrong sha256 was accepted")
except StorageIntegrityError:
    assert not default_storage.exists("outputs/wrong.bin")
chunk = StoredChunk.objects.get(file__name=name, index=1)
flipped = bytearray(chunk.data)
flipped[99] ^= 1
StoredChunk.objects.filter(pk=chunk.pk).update(data=bytes(flipped))
try:
    default_storage.open(name).read()
    raise AssertionError("a flipped byte went unnoticed")
except StorageIntegrityError:
    pass
default_storage.delete(name)
assert not StoredFile.objects.exists() and not StoredChunk.objects.exists()
print("ok")
"""

PG_CRASH = """
call_command("migrate", verbosity=0)
marker = sys.argv[1]

class Stalling(__import__("io").RawIOBase):
    # Hands out four chunks, says how many chunks its own transaction holds, then hangs.
    def __init__(self):
        super().__init__()
        self.given = 0
    def readable(self):
        return True
    def readinto(self, buffer):
        if self.given >= 4 * CHUNK_BYTES:
            with open(marker + ".tmp", "w") as out:
                out.write(str(StoredChunk.objects.count()))
            os.rename(marker + ".tmp", marker)
            time.sleep(600)
        size = min(len(buffer), CHUNK_BYTES)
        buffer[:size] = b"y" * size
        self.given += size
        return size

default_storage.save("outputs/crashed.bin", File(Stalling()))
"""

PG_AFTER_CRASH = """
assert not default_storage.exists("outputs/crashed.bin")
assert default_storage.save("outputs/crashed.bin", ContentFile(b"retried")) == "outputs/crashed.bin"
print("ok")
"""


def run_django_child(url: str, data_dir: Path, script: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [PYTHON, "-c", PG_PRELUDE + script, *args], cwd=PROJECT_ROOT, env=django_child_env(url, data_dir),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def django_child_env(url: str, data_dir: Path) -> dict[str, str]:
    return child_env(
        DATABASE_URL=url, CORDON_STORAGE="database", CORDON_DATA_DIR=str(data_dir),
        DJANGO_SETTINGS_MODULE="playground.settings",
    )  # fmt: skip


def test_database_storage_on_postgresql_saves_reads_verifies_and_deletes(postgres_cluster, tmp_path):
    url = postgres_cluster.database_url("storage_core")
    assert run_django_child(url, tmp_path, PG_CORE, str(tmp_path)) == "ok"


def test_a_host_killed_mid_upload_leaves_no_half_output_visible(postgres_cluster: pg.PostgresCluster, tmp_path):
    url = postgres_cluster.database_url("storage_crash")
    marker = tmp_path / "four-chunks-written"
    writer = subprocess.Popen(
        [PYTHON, "-c", PG_PRELUDE + PG_CRASH, str(marker)], cwd=PROJECT_ROOT, env=django_child_env(url, tmp_path),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert writer.poll() is None, writer.stderr.read().decode() if writer.stderr else ""
            assert time.monotonic() < deadline, "the writer never reached its fourth chunk"
            time.sleep(0.05)
        assert int(marker.read_text()) == 4  # the writer's own transaction holds four chunks
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
        if writer.stderr:
            writer.stderr.close()

    with postgres_cluster.connect("storage_crash") as conn:
        files = conn.execute("SELECT count(*) FROM playground_storedfile").fetchone()
        chunks = conn.execute("SELECT count(*) FROM playground_storedchunk").fetchone()
    assert files == (0,) and chunks == (0,)
    assert run_django_child(url, tmp_path, PG_AFTER_CRASH) == "ok"
