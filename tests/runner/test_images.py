"""Guest images: pinned by archive digest, verified path by path, runnable in a chroot."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from runner.config import Paths, paths_from_env
from runner.images import ImageError, ImageStore, load_recipe, read_lock, recipe_names
from tests.conftest import PYTHON, child_env

pytestmark = pytest.mark.images


@pytest.fixture(scope="module")
def store() -> ImageStore:
    return ImageStore(paths_from_env())


def test_every_recipe_is_pinned_in_the_lock_with_its_packages() -> None:
    lock = read_lock()
    assert set(recipe_names()) == {"node", "python"} <= set(lock)
    for name in recipe_names():
        entry = lock[name]
        assert entry.digest.startswith("sha256:")
        assert len(entry.digest) == 71
        assert entry.recipe_sha256 == load_recipe(name).sha256, f"{name}: lock is stale; run make images"
        names = {p.split("=", 1)[0] for p in entry.packages}
        assert set(load_recipe(name).packages) <= names
        assert all("=" in p for p in entry.packages)


@pytest.mark.parametrize("name", ["python", "node"])
def test_both_images_exist_and_verify(store: ImageStore, name: str) -> None:
    report = store.verify(name)
    assert report.ok, report.problems
    assert report.files_checked > 1000


def test_the_archive_digest_is_the_sha256_of_the_archive_file(store: ImageStore) -> None:
    ref = store.resolve("node")
    out = subprocess.run(["sha256sum", str(ref.archive)], capture_output=True, text=True, check=True).stdout
    assert ref.digest == "sha256:" + out.split()[0]


@pytest.mark.parametrize(
    ("name", "argv", "expected"),
    [
        ("python", ["/usr/bin/python3", "-c", "import pandas, numpy; print('ok', numpy.arange(3).sum())"], "ok 3"),
        ("node", ["/usr/bin/node", "-e", "console.log(1)"], "1"),
    ],
)
def test_the_runtime_runs_inside_its_rootfs(store: ImageStore, name: str, argv: list[str], expected: str) -> None:
    rootfs = store.resolve(name).rootfs
    result = subprocess.run(
        ["chroot", str(rootfs), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


@pytest.mark.parametrize("name", ["python", "node"])
def test_the_rootfs_is_world_readable_without_setuid_devices_or_writable_paths(store: ImageStore, name: str) -> None:
    rootfs = store.resolve(name).rootfs
    for mount_point in ("input", "output", "tmp", "proc", "dev"):
        assert (rootfs / mount_point).is_dir()
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for entry in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, entry))
            if stat.S_ISLNK(st.st_mode):
                continue
            assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode), entry
            assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), f"setuid/setgid bit on {entry}"
            assert st.st_mode & stat.S_IROTH, f"not world-readable: {entry}"
            assert not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), f"group/world-writable: {entry}"
            assert st.st_uid == 0


def test_a_second_build_with_unchanged_recipes_is_a_no_op(project_root: Path) -> None:
    result = subprocess.run(
        [PYTHON, "-m", "runner", "images", "build"],
        cwd=project_root,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "mmdebstrap" not in result.stderr
    lines = dict(line.split("\t", 1) for line in result.stdout.splitlines())
    assert lines["python"].startswith("cached\t")
    assert lines["node"].startswith("cached\t")


@pytest.fixture
def tampered_copy(store: ImageStore, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the node image in its own images dir (hard links; edited files are unlinked first)."""
    ref = store.resolve("node")
    copy = Paths(data_dir=tmp_path / "data", images_dir=tmp_path / "images")
    copy.archives_dir.mkdir(parents=True)
    copy.rootfs_dir.mkdir(parents=True)
    os.link(ref.archive, copy.archives_dir / ref.archive.name)
    subprocess.run(["cp", "-al", str(ref.rootfs), str(copy.rootfs_dir / ref.rootfs.name)], check=True)
    return copy.images_dir, copy.rootfs_dir / ref.rootfs.name


def _rewrite(path: Path, data: bytes) -> None:
    mode = path.stat().st_mode
    path.unlink()  # break the hard link so the real image is untouched
    path.write_bytes(data)
    path.chmod(stat.S_IMODE(mode))


def _verify_copy(project_root: Path, images_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "runner", "images", "verify", "node"],
        cwd=project_root,
        env=child_env(CORDON_IMAGES_DIR=str(images_dir)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_untouched_copy_verifies(project_root: Path, tampered_copy: tuple[Path, Path]) -> None:
    images_dir, _ = tampered_copy
    result = _verify_copy(project_root, images_dir)
    assert result.returncode == 0, result.stdout
    assert "node: ok" in result.stdout


def test_verify_names_the_file_after_one_byte_of_the_tree_changes(
    project_root: Path, tampered_copy: tuple[Path, Path]
) -> None:
    images_dir, rootfs = tampered_copy
    target = rootfs / "etc" / "debian_version"
    data = bytearray(target.read_bytes())
    data[0] ^= 0x01
    _rewrite(target, bytes(data))
    result = _verify_copy(project_root, images_dir)
    assert result.returncode == 1
    assert "node: FAILED" in result.stdout
    assert "modified: /etc/debian_version (content differ)" in result.stdout
    assert result.stdout.count("modified:") == 1


def test_verify_reports_missing_added_and_chmodded_files_by_path(
    project_root: Path, tampered_copy: tuple[Path, Path]
) -> None:
    images_dir, rootfs = tampered_copy
    (rootfs / "etc" / "hostname").unlink()
    (rootfs / "usr" / "bin" / "implant").write_bytes(b"#!/bin/sh\n")
    shell = rootfs / "usr" / "bin" / "dash"
    _rewrite(shell, shell.read_bytes())
    shell.chmod(0o4755)
    out = _verify_copy(project_root, images_dir).stdout
    assert "missing: /etc/hostname" in out
    assert "unexpected: /usr/bin/implant" in out
    assert "modified: /usr/bin/dash (mode differ)" in out


def test_verify_fails_when_the_archive_is_not_the_pinned_one(
    project_root: Path, tampered_copy: tuple[Path, Path]
) -> None:
    images_dir, _ = tampered_copy
    archive = next((images_dir / "archives").iterdir())
    data = archive.read_bytes()
    archive.unlink()
    archive.write_bytes(data + b"\0" * 512)  # still a valid tar, different digest
    out = _verify_copy(project_root, images_dir).stdout
    assert "archive digest is sha256:" in out
    assert "lock pins" in out


def test_an_unknown_or_malformed_recipe_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="no image recipe named 'ruby'"):
        load_recipe("ruby")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "recipe.toml").write_text('suite = "bookworm"\npackages = ["python3; rm -rf /"]\n')
    with pytest.raises(ImageError, match=r"malformed recipe|package names"):
        load_recipe("bad", tmp_path)
    shutil.rmtree(tmp_path / "bad")
