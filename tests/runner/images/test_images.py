"""Guest images: recorded by archive digest, verified path by path, runnable in a chroot; a build
compares with the tracked pin and never writes it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from runner.config import PIN_PATH, Paths, paths_from_env
from runner.images import ImageError, ImageStore, OverlayFile, Recipe, load_recipe, read_lock, recipe_names
from runner.images.build import _needed, _Package, lay_overlay
from tests.conftest import PYTHON, child_env

pytestmark = pytest.mark.images


@pytest.fixture(scope="module")
def store() -> ImageStore:
    return ImageStore(paths_from_env())


@pytest.mark.parametrize(
    ("lock_path", "stale"),
    [(PIN_PATH, "the pin is stale; python -m runner images pin"), (None, "this host's build is stale; make images")],
    ids=["the tracked pin", "this host's record"],
)
def test_every_recipe_is_in_the_lock_with_its_packages(lock_path: Path | None, stale: str) -> None:
    lock = read_lock(lock_path)
    assert set(recipe_names()) == {"node", "python", "python-data"} <= set(lock)
    for name in recipe_names():
        entry = lock[name]
        assert entry.digest.startswith("sha256:")
        assert len(entry.digest) == 71
        assert entry.recipe_sha256 == load_recipe(name).sha256, f"{name}: {stale}"
        names = {p.split("=", 1)[0] for p in entry.packages}
        assert set(load_recipe(name).packages) <= names
        assert not set(load_recipe(name).prune) & names, f"{name}: a pruned package is in the image"
        assert all("=" in p for p in entry.packages)


@pytest.mark.parametrize("name", ["python", "node", "python-data"])
def test_every_image_exists_and_verifies(store: ImageStore, name: str) -> None:
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


@pytest.mark.parametrize("name", ["python", "node", "python-data"])
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


def test_a_second_build_with_unchanged_recipes_is_a_no_op_that_leaves_the_tracked_pin_alone(
    project_root: Path,
) -> None:
    pin_before = PIN_PATH.read_bytes()
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
    lines = {line.split("\t")[0]: line.split("\t")[1:] for line in result.stdout.splitlines()}
    built = read_lock()
    for name in ("python", "node", "python-data"):
        state, digest, pin_state = lines[name]
        assert (state, digest) == ("cached", built[name].digest)
        assert pin_state == ("pinned" if read_lock(PIN_PATH)[name].digest == digest else "differs-from-pin")
        if pin_state == "differs-from-pin":
            assert f"python -m runner images pin {name}" in result.stderr
    assert PIN_PATH.read_bytes() == pin_before


@pytest.mark.parametrize("name", ["python", "node", "python-data"])
def test_an_image_holds_nothing_of_the_host_that_built_it(store: ImageStore, name: str) -> None:
    etc = store.resolve(name).rootfs / "etc"
    assert (etc / "resolv.conf").read_bytes() == b""
    assert (etc / "hostname").read_bytes() == b"sandbox\n"


def test_the_python_image_has_no_compiler_or_development_files_that_scipy_declared(store: ImageStore) -> None:
    rootfs = store.resolve("python").rootfs
    for path in ("usr/bin/gcc", "usr/bin/g++", "usr/bin/cc", "usr/bin/ld", "usr/include/boost", "usr/bin/pythran"):
        assert not (rootfs / path).exists(), path
    assert not list((rootfs / "usr/lib/x86_64-linux-gnu").glob("libopenblas*"))
    assert not (rootfs / "usr/share/unicode").exists()


def test_no_pth_file_in_the_python_image_runs_code_when_python_starts(store: ImageStore) -> None:
    """A `.pth` line that starts with `import` runs at every interpreter start (matplotlib's
    nspkg.pth cost ~3 ms a run)."""
    rootfs = store.resolve("python").rootfs
    pth_files = sorted(rootfs.glob("usr/lib/python3*/dist-packages/*.pth")) + sorted(
        rootfs.glob("usr/local/lib/python3*/dist-packages/*.pth")
    )
    assert pth_files
    for pth in pth_files:
        lines = [line for line in pth.read_text().splitlines() if line.strip() and not line.startswith("#")]
        assert not [line for line in lines if line.startswith(("import ", "import\t"))], pth
    assert not [p for p in pth_files if "/input" in p.read_text()]  # inputs are found by the hook, not the path


def test_the_python_startup_hook_is_byte_compiled_so_no_program_compiles_it(store: ImageStore) -> None:
    rootfs = store.resolve("python").rootfs
    source = rootfs / "usr/lib/python3.11/sitecustomize.py"
    assert source.is_file() and not source.is_symlink()
    cached = (rootfs / "usr/lib/python3.11/__pycache__/sitecustomize.cpython-311.pyc").read_bytes()
    flags = int.from_bytes(cached[4:8], "little")
    assert flags == 0b11  # hash-based and checked, as Debian's own .pyc files
    check = "import importlib.util as u, sys; sys.stdout.buffer.write(u.source_hash(open(sys.argv[1], 'rb').read()))"
    argv = ["chroot", str(rootfs), "/usr/bin/python3", "-I", "-S", "-B", "-c", check, f"/{source.relative_to(rootfs)}"]
    digest = subprocess.run(argv, capture_output=True, check=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}).stdout
    assert cached[8:16] == digest


# --- recipes' prune and overlay, without building ---------------------------------------


def _recipe_dir(tmp_path: Path, overlay: dict[str, bytes]) -> Path:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "recipe.toml").write_text(
        'suite = "bookworm"\npackages = ["python3"]\nprune = ["python3-pythran"]\n'
        'source_date_epoch = 1\ncommand = ["/usr/bin/python3"]\n'
    )
    for name, data in overlay.items():
        path = tmp_path / "img" / "rootfs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return tmp_path


def test_a_recipe_s_overlay_is_part_of_its_hash_and_holds_no_links(tmp_path: Path) -> None:
    recipes = _recipe_dir(tmp_path, {"etc/hook.py": b"print(1)\n"})
    recipe = load_recipe("img", recipes)
    assert recipe.prune == ("python3-pythran",)
    assert recipe.overlay == (OverlayFile("etc/hook.py", b"print(1)\n", False),)
    (recipes / "img" / "rootfs" / "etc" / "__pycache__").mkdir()
    (recipes / "img" / "rootfs" / "etc" / "__pycache__" / "hook.cpython-311.pyc").write_bytes(b"stray")
    assert load_recipe("img", recipes) == recipe  # a host's bytecode is neither laid nor hashed
    (recipes / "img" / "rootfs" / "etc" / "hook.py").write_bytes(b"print(2)\n")
    assert load_recipe("img", recipes).sha256 != recipe.sha256
    (recipes / "img" / "rootfs" / "etc" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(ImageError, match="regular files and directories only"):
        load_recipe("img", recipes)


def test_an_overlay_replaces_a_link_itself_and_never_writes_through_a_linked_directory(tmp_path: Path) -> None:
    tree, elsewhere = tmp_path / "tree", tmp_path / "elsewhere"
    (tree / "usr/lib").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "target.py").write_text("theirs")
    (tree / "usr/lib/hook.py").symlink_to(elsewhere / "target.py")
    recipe = load_recipe("img", _recipe_dir(tmp_path, {}))
    lay_overlay(replace(recipe, overlay=(OverlayFile("usr/lib/hook.py", b"ours", False),)), tree)
    assert (tree / "usr/lib/hook.py").read_bytes() == b"ours" and not (tree / "usr/lib/hook.py").is_symlink()
    assert (elsewhere / "target.py").read_text() == "theirs"
    (tree / "lib").symlink_to(elsewhere)
    with pytest.raises(ImageError, match="/lib is not a directory in the image"):
        lay_overlay(replace(recipe, overlay=(OverlayFile("lib/x.py", b"ours", False),)), tree)
    assert not (elsewhere / "x.py").exists()


def test_pruning_keeps_what_anything_else_needs_and_follows_the_alternative_apt_chose() -> None:
    graph = {
        "scipy": _Package(False, (("numpy",), ("pythran",), ("libblas3", "libopenblas0"))),
        "numpy": _Package(False, (("libblas3", "libopenblas0"),)),
        "pythran": _Package(False, (("gcc",), ("libopenblas-dev",), ("numpy",))),
        "libopenblas-dev": _Package(False, (("libopenblas0",),)),
        "gcc": _Package(False, (("libc6",),)),
        "libc6": _Package(True, ()),
        "libblas3": _Package(False, ()),
        "libopenblas0": _Package(False, ()),
    }
    roots = {"scipy"} | {name for name, pkg in graph.items() if pkg.essential}
    kept = _needed(roots, graph, excluded={"pythran"})
    assert kept == {"scipy", "numpy", "libblas3", "libc6"}
    assert set(graph) - kept == {"pythran", "gcc", "libopenblas-dev", "libopenblas0"}


@pytest.fixture
def tampered_copy(store: ImageStore, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the node image in its own images dir (hard links; edited files are unlinked first)."""
    ref = store.resolve("node")
    copy = Paths(data_dir=tmp_path / "data", images_dir=tmp_path / "images")
    copy.archives_dir.mkdir(parents=True)
    copy.rootfs_dir.mkdir(parents=True)
    os.link(ref.archive, copy.archives_dir / ref.archive.name)
    subprocess.run(["cp", "-al", str(ref.rootfs), str(copy.rootfs_dir / ref.rootfs.name)], check=True)
    shutil.copy(store.record_path, copy.image_record)
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


def test_verify_fails_when_the_archive_is_not_the_recorded_one(
    project_root: Path, tampered_copy: tuple[Path, Path]
) -> None:
    images_dir, _ = tampered_copy
    archive = next((images_dir / "archives").iterdir())
    data = archive.read_bytes()
    archive.unlink()
    archive.write_bytes(data + b"\0" * 512)  # still a valid tar, different digest
    out = _verify_copy(project_root, images_dir).stdout
    assert "archive digest is sha256:" in out
    assert "this host's record says sha256:" in out


def test_an_unknown_or_malformed_recipe_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="no image recipe named 'ruby'"):
        load_recipe("ruby")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "recipe.toml").write_text('suite = "bookworm"\npackages = ["python3; rm -rf /"]\n')
    with pytest.raises(ImageError, match=r"malformed recipe|package names"):
        load_recipe("bad", tmp_path)
    shutil.rmtree(tmp_path / "bad")


# --- the host's record and the tracked pin, with mmdebstrap stood in for -------------------


class FakeBuilds:
    """Stands in for mmdebstrap: a build's archive is a few bytes naming its packages (so the same
    packages give the same digest, as a reproducible build does) and its rootfs an empty tree."""

    def __init__(self, store: ImageStore, packages: tuple[str, ...]):
        self.store, self.packages, self.count = store, packages, 0

    def __call__(self, recipe: Recipe, log: object) -> tuple[str, tuple[str, ...]]:
        self.count += 1
        data = json.dumps([recipe.name, self.packages]).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.store.paths.archives_dir.mkdir(parents=True, exist_ok=True)
        self.store.archive_path(digest).write_bytes(data)
        self.store.rootfs_path(digest).mkdir(parents=True, exist_ok=True)
        return digest, self.packages


@pytest.fixture
def scratch_store(tmp_path: Path) -> ImageStore:
    """A store in a temporary images dir whose pin is a copy of the tracked one."""
    pin = tmp_path / "lock.json"
    shutil.copy(PIN_PATH, pin)
    return ImageStore(Paths(data_dir=tmp_path / "data", images_dir=tmp_path / "images"), pin_path=pin)


def _updated(packages: tuple[str, ...]) -> tuple[str, ...]:
    """The pinned manifest after Debian published an update of zlib1g."""
    return tuple(p + "+deb12u99" if p.startswith("zlib1g=") else p for p in packages)


def test_a_rebuild_that_misses_the_pin_is_recorded_here_and_leaves_the_pin_byte_identical(
    scratch_store: ImageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracked, pin = PIN_PATH.read_bytes(), scratch_store.pin_path.read_bytes()
    pinned = read_lock(scratch_store.pin_path)["node"]
    monkeypatch.setattr(scratch_store, "_build_one", FakeBuilds(scratch_store, _updated(pinned.packages)))
    logs: list[str] = []
    (result,) = scratch_store.build(["node"], log=logs.append)

    assert scratch_store.pin_path.read_bytes() == pin
    assert PIN_PATH.read_bytes() == tracked
    assert (result.skipped, result.reproduced, result.pinned_digest) == (False, False, pinned.digest)
    assert result.digest != pinned.digest
    zlib = next(p for p in pinned.packages if p.startswith("zlib1g="))
    assert result.package_changes == (f"zlib1g {zlib[7:]} -> {zlib[7:]}+deb12u99",)
    recorded = scratch_store.built()["node"]
    assert (recorded.digest, recorded.packages) == (result.digest, _updated(pinned.packages))
    assert scratch_store.resolve("node").digest == result.digest
    said = "\n".join(logs)
    assert "does not reproduce the digest pinned" in said
    assert f"zlib1g {zlib[7:]} -> {zlib[7:]}+deb12u99" in said
    assert "python -m runner images pin node" in said


def test_a_build_is_up_to_date_by_the_hosts_record_whatever_the_pin_says(
    scratch_store: ImageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBuilds(scratch_store, ("base-files=1",))
    monkeypatch.setattr(scratch_store, "_build_one", fake)
    scratch_store.build(["node"], log=lambda _: None)
    (again,) = scratch_store.build(["node"], log=lambda _: None)
    assert (fake.count, again.skipped, again.reproduced) == (1, True, False)
    archive = scratch_store.archive_path(again.digest)
    os.utime(archive, ns=(0, 0))  # an archive changed since the build is rebuilt
    (third,) = scratch_store.build(["node"], log=lambda _: None)
    assert (fake.count, third.skipped) == (2, False)


def test_pinning_is_a_separate_deliberate_step_after_which_the_build_reproduces_the_pin(
    scratch_store: ImageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned = read_lock(scratch_store.pin_path)
    monkeypatch.setattr(scratch_store, "_build_one", FakeBuilds(scratch_store, _updated(pinned["node"].packages)))
    (built,) = scratch_store.build(["node"], log=lambda _: None)

    (pin,) = scratch_store.pin(["node"], log=lambda _: None)
    assert (pin.changed, pin.previous, pin.digest) == (True, pinned["node"].digest, built.digest)
    repinned = read_lock(scratch_store.pin_path)
    assert repinned["node"] == scratch_store.built()["node"]
    assert repinned["python"] == pinned["python"]  # only what was named is re-pinned
    after_pin = scratch_store.pin_path.read_bytes()

    (rebuilt,) = scratch_store.build(["node"], force=True, log=lambda _: None)
    assert (rebuilt.skipped, rebuilt.reproduced, rebuilt.digest) == (False, True, built.digest)
    assert scratch_store.pin_path.read_bytes() == after_pin
    (again,) = scratch_store.pin(["node"], log=lambda _: None)
    assert not again.changed
    assert scratch_store.pin_path.read_bytes() == after_pin


def test_pinning_refuses_an_image_this_host_has_not_built(scratch_store: ImageStore) -> None:
    before = scratch_store.pin_path.read_bytes()
    with pytest.raises(ImageError, match="no build of the current recipe"):
        scratch_store.pin(["node"])
    assert scratch_store.pin_path.read_bytes() == before


def _old_scheme_build(store: ImageStore, name: str, packages: list[str]) -> str:
    """What Cordon before the host's record left: an archive, a rootfs and a `<name>.build.json` stamp."""
    data = f"an archive of {name}".encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    store.paths.archives_dir.mkdir(parents=True)
    store.archive_path(digest).write_bytes(data)
    dpkg = store.rootfs_path(digest) / "var/lib/dpkg"
    dpkg.mkdir(parents=True)
    stanzas = [
        f"Package: {p.split('=')[0]}\nStatus: install ok installed\nVersion: {p.split('=')[1]}\n" for p in packages
    ]
    (dpkg / "status").write_text("\n".join(stanzas))
    st = store.archive_path(digest).stat()
    stamp = {"recipe_sha256": load_recipe(name).sha256, "digest": digest,
             "archive_size": st.st_size, "archive_mtime_ns": st.st_mtime_ns}  # fmt: skip
    (store.paths.images_dir / f"{name}.build.json").write_text(json.dumps(stamp))
    return digest


def test_a_build_stamped_by_the_old_scheme_is_adopted_into_the_record_without_rebuilding(
    scratch_store: ImageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = _old_scheme_build(scratch_store, "node", ["zlib1g=1:2", "base-files=12"])
    fake = FakeBuilds(scratch_store, ())
    monkeypatch.setattr(scratch_store, "_build_one", fake)
    (result,) = scratch_store.build(["node"], log=lambda _: None)
    assert (fake.count, result.skipped, result.digest) == (0, True, digest)
    assert scratch_store.built()["node"].packages == ("base-files=12", "zlib1g=1:2")
    assert not (scratch_store.paths.images_dir / "node.build.json").exists()


def test_an_old_scheme_build_whose_archive_no_longer_matches_its_stamp_is_rebuilt(
    scratch_store: ImageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = _old_scheme_build(scratch_store, "node", ["zlib1g=1:2"])
    archive = scratch_store.archive_path(digest)
    stamped = archive.stat()
    archive.write_bytes(b"an archive of nod3")  # same size, other content
    os.utime(archive, ns=(stamped.st_atime_ns, stamped.st_mtime_ns))
    fake = FakeBuilds(scratch_store, ("zlib1g=1:3",))
    monkeypatch.setattr(scratch_store, "_build_one", fake)
    (result,) = scratch_store.build(["node"], log=lambda _: None)
    assert (fake.count, result.skipped) == (1, False)
    assert scratch_store.built()["node"].digest == result.digest != digest


def test_images_build_adopts_a_real_old_scheme_build_and_never_writes_the_tracked_pin(
    store: ImageStore, project_root: Path, tmp_path: Path
) -> None:
    """From the command line, as `make images` runs it, on a copy of this host's node image left
    by the old scheme; a stand-in mmdebstrap fails, so a needless rebuild would fail the test."""
    ref, recorded = store.resolve("node"), store.built()["node"]
    copy = Paths(data_dir=tmp_path / "data", images_dir=tmp_path / "images")
    copy.archives_dir.mkdir(parents=True)
    copy.rootfs_dir.mkdir(parents=True)
    os.link(ref.archive, copy.archives_dir / ref.archive.name)
    subprocess.run(["cp", "-al", str(ref.rootfs), str(copy.rootfs_dir / ref.rootfs.name)], check=True)
    st = ref.archive.stat()
    stamp = {"recipe_sha256": recorded.recipe_sha256, "digest": ref.digest,
             "archive_size": st.st_size, "archive_mtime_ns": st.st_mtime_ns}  # fmt: skip
    (copy.images_dir / "node.build.json").write_text(json.dumps(stamp))
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "mmdebstrap").write_text("#!/bin/sh\necho 'no network in this test' >&2\nexit 1\n")
    (fake_bin / "mmdebstrap").chmod(0o755)
    tracked = PIN_PATH.read_bytes()

    result = subprocess.run(
        [PYTHON, "-m", "runner", "images", "build", "node"],
        cwd=project_root,
        env=child_env(CORDON_IMAGES_DIR=str(copy.images_dir), PATH=f"{fake_bin}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"node\tcached\t{ref.digest}\t"), result.stdout
    assert read_lock(copy.image_record)["node"].packages == recorded.packages
    assert PIN_PATH.read_bytes() == tracked
