"""The image store: builds, finds and verifies images under the images directory, recorded in
the host's record there, compared with the tracked pin."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from runner.config import PIN_PATH, RECIPES_DIR, Paths
from runner.images.build import (
    INDEX_FILE,
    byte_compile_overlay,
    finish_tree,
    index_modules,
    install_wheels,
    lay_overlay,
    mmdebstrap,
    package_manifest,
    prune,
    replace_host_files,
    write_archive,
)
from runner.images.recipes import (
    BuildResult,
    BuiltImage,
    ImageError,
    ImageRef,
    LockEntry,
    Log,
    PinResult,
    Recipe,
    VerifyReport,
    digest_hex,
    iso,
    load_recipe,
    now_iso,
    package_changes,
    read_lock,
    read_record,
    rmtree,
    sha256_file,
    shown,
    write_images,
    write_lock,
)
from runner.images.verify import compare_manifests, manifest_from_archive, manifest_from_tree

# --- the store ------------------------------------------------------------------------


class ImageStore:
    """Builds, finds and verifies images under the images directory, recorded in the host's
    record there; compares builds with the tracked pin and, when told to, pins them."""

    def __init__(self, paths: Paths, *, recipes_dir: Path = RECIPES_DIR, pin_path: Path = PIN_PATH):
        self.paths = paths
        self.recipes_dir = recipes_dir
        self.pin_path = pin_path

    @property
    def record_path(self) -> Path:
        return self.paths.image_record

    def archive_path(self, digest: str) -> Path:
        return self.paths.archives_dir / f"{digest_hex(digest)}.tar"

    def rootfs_path(self, digest: str) -> Path:
        return self.paths.rootfs_dir / digest_hex(digest)

    def built(self) -> dict[str, LockEntry]:
        """What this host built, by image name."""
        return read_lock(self.record_path)

    def pinned(self) -> dict[str, LockEntry]:
        return read_lock(self.pin_path)

    def resolve(self, name: str) -> ImageRef:
        """The image `name` this host built, which must be present (not re-verified here)."""
        entry = self.built().get(name)
        if entry is None:
            raise ImageError(f"image {name!r} is not built on this host (not in {self.record_path}); run `make images`")
        ref = ImageRef(name, entry.digest, self.archive_path(entry.digest), self.rootfs_path(entry.digest))
        if not ref.archive.is_file() or not ref.rootfs.is_dir():
            raise ImageError(f"image {name!r} ({entry.digest}) is not built on this host; run `make images`")
        return ref

    # build

    def build(self, names: list[str], *, force: bool = False, jobs: int = 2, log: Log = print) -> list[BuildResult]:
        """Build what is not up to date, record it in the host's record, and compare each image
        with the pin. Never writes the pin."""
        recipes = [load_recipe(n, self.recipes_dir) for n in names]
        with self._exclusive():
            record = read_record(self.record_path)
            self._adopt_legacy_builds([r for r in recipes if r.name not in record], record, log)
            todo = [r for r in recipes if force or not self._up_to_date(r, record.get(r.name))]
            for recipe in recipes:
                if recipe not in todo:
                    log(f"{recipe.name}: up to date ({record[recipe.name].entry.digest})")
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                # Each build is recorded as it finishes, so one failing does not lose another.
                built = pool.map(lambda r: self._build_one(r, log), todo)
                for recipe, (digest, packages) in zip(todo, built, strict=True):
                    record[recipe.name] = self._recorded(recipe, digest, packages, record.get(recipe.name))
                    self._save_record(record)
                    self._legacy_stamp(recipe.name).unlink(missing_ok=True)
        pins = self.pinned()
        results = [
            self._compare_with_pin(r.name, record[r.name].entry, pins.get(r.name), skipped=r not in todo, log=log)
            for r in recipes
        ]
        return sorted(results, key=lambda r: r.name)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.paths.images_dir.mkdir(parents=True, exist_ok=True)
        with open(self.paths.images_dir / ".build.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _up_to_date(self, recipe: Recipe, built: BuiltImage | None) -> bool:
        if built is None or built.entry.recipe_sha256 != recipe.sha256:
            return False
        try:
            st = self.archive_path(built.entry.digest).stat()
        except FileNotFoundError:
            return False
        unchanged = (built.archive_size, built.archive_mtime_ns) == (st.st_size, st.st_mtime_ns)
        return unchanged and self.rootfs_path(built.entry.digest).is_dir()

    def _recorded(self, recipe: Recipe, digest: str, packages: tuple[str, ...], old: BuiltImage | None) -> BuiltImage:
        built_at = old.entry.built_at if old is not None and old.entry.digest == digest else now_iso()
        st = self.archive_path(digest).stat()
        return BuiltImage(LockEntry(digest, recipe.sha256, built_at, packages), st.st_size, st.st_mtime_ns)

    def _compare_with_pin(
        self, name: str, built: LockEntry, pin: LockEntry | None, *, skipped: bool, log: Log
    ) -> BuildResult:
        pin_file = shown(self.pin_path)
        pin_it = f"`python -m runner images pin {name}`, then commit {pin_file}"
        if pin is None or pin.recipe_sha256 != built.recipe_sha256:
            what = "no build of this recipe" if pin is None else "a build of an older recipe"
            log(f"{name}: {pin_file} pins {what}; this host built {built.digest}\n{name}:   to pin it: {pin_it}")
            return BuildResult(name, built.digest, skipped, 0.0, None, (), None if pin is None else pin.digest)
        if pin.digest == built.digest:
            log(f"{name}: reproduces the digest pinned in {pin_file}")
            return BuildResult(name, built.digest, skipped, 0.0, True, (), pin.digest)
        changes = package_changes(pin.packages, built.packages)
        log(
            f"{name}: WARNING: does not reproduce the digest pinned in {pin_file} (Debian published updates?)\n"
            f"{name}:   pinned {pin.digest}\n"
            f"{name}:   built  {built.digest}, which runs on this host use and record\n"
            f"{name}:   packages (pinned -> built): {', '.join(changes) or 'the same; file contents differ'}\n"
            f"{name}:   if this build should be the pin (a deliberate choice): {pin_it}"
        )
        return BuildResult(name, built.digest, skipped, 0.0, False, changes, pin.digest)

    def _legacy_stamp(self, name: str) -> Path:
        return self.paths.images_dir / f"{name}.build.json"

    def _save_record(self, record: dict[str, BuiltImage]) -> None:
        write_images(self.record_path, {name: built.to_json() for name, built in record.items()})

    def _adopt_legacy_builds(self, recipes: list[Recipe], record: dict[str, BuiltImage], log: Log) -> None:
        """Cordon once recorded a build only by a `<name>.build.json` stamp and by rewriting the
        tracked lock. Adopt such a build into the host's record, once, when its archive still
        hashes to the stamped digest, rather than rebuild it; its packages come from its rootfs."""
        adopted = {r.name: built for r in recipes if (built := self._legacy_build(r)) is not None}
        if not adopted:
            return
        record.update(adopted)
        self._save_record(record)
        for name, built in adopted.items():
            self._legacy_stamp(name).unlink()
            log(f"{name}: recorded the earlier build {built.entry.digest} in {self.record_path}")

    def _legacy_build(self, recipe: Recipe) -> BuiltImage | None:
        try:
            stamp = json.loads(self._legacy_stamp(recipe.name).read_text())
            digest = str(stamp["digest"])
            archive, rootfs = self.archive_path(digest), self.rootfs_path(digest)
            st = archive.stat()
        except (OSError, ValueError, KeyError, TypeError, ImageError):
            return None
        if (
            stamp.get("recipe_sha256") != recipe.sha256
            or (stamp.get("archive_size"), stamp.get("archive_mtime_ns")) != (st.st_size, st.st_mtime_ns)
            or not (rootfs / "var/lib/dpkg/status").is_file()
            or f"sha256:{sha256_file(archive)}" != digest
        ):
            return None
        entry = LockEntry(digest, recipe.sha256, iso(st.st_mtime), package_manifest(rootfs))
        return BuiltImage(entry, st.st_size, st.st_mtime_ns)

    def _build_one(self, recipe: Recipe, log: Log) -> tuple[str, tuple[str, ...]]:
        started = time.monotonic()
        work = self.paths.build_dir / f"{recipe.name}-{os.getpid()}"
        if work.exists():
            rmtree(work)
        work.mkdir(parents=True)
        try:
            tree = work / "rootfs"
            log(f"{recipe.name}: mmdebstrap {recipe.suite} {' '.join(recipe.packages)}")
            mmdebstrap(recipe, tree, work / "mmdebstrap.log")
            if recipe.prune:
                pruned = prune(recipe, tree, work / "prune.log")
                log(f"{recipe.name}: pruned {len(pruned)} packages: {' '.join(pruned)}")
            packages = package_manifest(tree)
            replace_host_files(tree)
            wheels = install_wheels(recipe, tree, self.paths.images_dir / "wheels", work / "wheels.log")
            if wheels:
                log(f"{recipe.name}: installed {len(wheels)} wheels: {' '.join(wheels)}")
            packages += wheels
            lay_overlay(recipe, tree)
            byte_compile_overlay(recipe, tree, work / "compile.log")
            if index_modules(recipe, tree, work / "index.log"):
                log(f"{recipe.name}: indexed its modules for completion ({(tree / INDEX_FILE).stat().st_size} bytes)")
            finish_tree(tree, recipe.source_date_epoch)
            archive_tmp = work / "image.tar"
            digest = write_archive(recipe, tree, work, archive_tmp)
            self.paths.archives_dir.mkdir(parents=True, exist_ok=True)
            self.paths.rootfs_dir.mkdir(parents=True, exist_ok=True)
            rootfs = self.rootfs_path(digest)
            if rootfs.exists():
                rmtree(rootfs)  # a partial or tampered tree of the same digest; ours is fresh
            tree.rename(rootfs)
            os.chmod(rootfs, 0o755)  # noqa: S103 - the image is meant to be world-readable
            archive_tmp.replace(self.archive_path(digest))
            log(f"{recipe.name}: built {digest} in {time.monotonic() - started:.0f} s")
            return digest, packages
        finally:
            rmtree(work)

    # pin

    def pin(self, names: list[str], *, log: Log = print) -> list[PinResult]:
        """Make this host's builds of `names` the reference pin: the one command that writes the
        tracked lock, for a developer who decided the new digests are wanted. Each archive is
        re-hashed first, so a pin names an archive that exists and matches it."""
        recipes = [load_recipe(n, self.recipes_dir) for n in names]
        with self._exclusive():
            built, pins = self.built(), self.pinned()
            results = []
            for recipe in recipes:
                entry = built.get(recipe.name)
                if entry is None or entry.recipe_sha256 != recipe.sha256:
                    raise ImageError(
                        f"{recipe.name}: this host has no build of the current recipe to pin; "
                        f"run `python -m runner images build {recipe.name}` first"
                    )
                archive = self.archive_path(entry.digest)
                if not archive.is_file() or f"sha256:{sha256_file(archive)}" != entry.digest:
                    raise ImageError(f"{recipe.name}: the archive of {entry.digest} is missing or altered; rebuild it")
                old = pins.get(recipe.name)
                result = PinResult(recipe.name, entry.digest, None if old is None else old.digest)
                if result.changed or old is None or old.recipe_sha256 != entry.recipe_sha256:
                    pins[recipe.name] = entry
                    changes = ", ".join(package_changes(old.packages, entry.packages)) if old else "new pin"
                    log(f"{recipe.name}: pinning {entry.digest} (was {result.previous}; {changes or 'same packages'})")
                results.append(result)
            if pins != self.pinned():
                write_lock(pins, self.pin_path)
                log(f"wrote {shown(self.pin_path)}; review and commit it")
        return results

    # verify

    def verified_stamp(self, digest: str) -> Path:
        return self.paths.rootfs_dir / f"{digest_hex(digest)}.verified"

    def recently_verified(self, ref: ImageRef, max_age_s: float = 3600.0) -> bool:
        """Whether a full verification of this image passed within `max_age_s` (runs skip it then):
        the stamp's time, or this process's own memory of it where the stamp cannot be written."""
        try:
            stamped = self.verified_stamp(ref.digest).stat().st_mtime
        except FileNotFoundError:
            stamped = 0.0
        return time.time() - max(stamped, _VERIFIED_HERE.get(ref.digest, 0.0)) < max_age_s

    def verify(self, name: str) -> VerifyReport:
        entry = self.built().get(name)
        if entry is None:
            return VerifyReport(name, None, [f"{name}: not built on this host (not in {self.record_path})"])
        report = VerifyReport(name, entry.digest)
        archive, rootfs = self.archive_path(entry.digest), self.rootfs_path(entry.digest)
        if not archive.is_file():
            report.problems.append(f"archive missing: {archive}")
            return report
        expected, actual_digest = manifest_from_archive(archive)
        if actual_digest != entry.digest:
            report.problems.append(f"archive digest is {actual_digest}, this host's record says {entry.digest}")
        if not rootfs.is_dir():
            report.problems.append(f"extracted rootfs missing: {rootfs}")
            return report
        actual = manifest_from_tree(rootfs)
        report.files_checked = len(actual)
        report.problems.extend(compare_manifests(expected, actual))
        stamp = self.verified_stamp(entry.digest)
        try:
            if report.ok:
                _VERIFIED_HERE[entry.digest] = time.time()
                stamp.touch()
            else:
                _VERIFIED_HERE.pop(entry.digest, None)
                stamp.unlink(missing_ok=True)
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            # Images shared read-only (several workers on one machine): remembered by this process.
        return report


# Digests this process verified, and when: where the stamp cannot be written (a read-only images dir).
_VERIFIED_HERE: dict[str, float] = {}
