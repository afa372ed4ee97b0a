"""The doctor's image check: every file hashed again by default; with --no-image-hashes (a slow
host whose images were just verified, the emulated host of make test-vm) each image only shown
built and present, and saying it was not hashed."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config import paths_from_env
from runner.doctor import _images
from runner.images import ImageStore


def test_without_hashes_each_image_is_shown_present_and_a_missing_one_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = ImageStore(paths_from_env())
    if "python" not in store.built():
        pytest.skip("no python image built here (make images)")

    def no_hashing(self: ImageStore, name: str) -> None:
        raise AssertionError("hashed an image")

    monkeypatch.setattr(ImageStore, "verify", no_hashing)
    checks = {c.name: c for c in _images(store, hash_files=False)}
    assert checks["image python"].ok, checks["image python"]
    assert checks["image python"].detail.startswith(store.built()["python"].digest)
    assert checks["image python"].detail.endswith("present; not hashed again (--no-image-hashes)")

    monkeypatch.setattr(ImageStore, "rootfs_path", lambda self, digest: tmp_path / "gone")
    gone = {c.name: c for c in _images(store, hash_files=False)}["image python"]
    assert not gone.ok and "is not built on this host" in gone.detail, gone
