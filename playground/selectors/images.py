"""The guest images as this host built them, for the images page.

Read from this host's build record ($CORDON_IMAGES_DIR/built.json), the file runs resolve their
image by and /api/images lists: it changes the moment `make images` does. The RuntimeImage rows
are a copy of it taken at `make migrate`, which may lag behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.images import ImageError, load_recipe, read_lock

# The Debian package that is each image's runtime, and what to call it.
RUNTIME_PACKAGES = {"python": ("Python", "python3"), "node": ("Node.js", "nodejs")}


@dataclass(frozen=True)
class Package:
    name: str
    version: str


@dataclass(frozen=True)
class ImageSummary:
    name: str
    digest: str
    built_at: str
    runtime: str | None  # "Python 3.11.2"; None when the record has no such package
    requested: list[Package]  # the packages its recipe asks for
    packages: list[Package]  # every package in the image

    @property
    def requested_names(self) -> str:
        return ", ".join(p.name for p in self.requested)


def image_list_built() -> list[ImageSummary]:
    summaries = []
    for name, entry in sorted(read_lock().items()):
        packages = [Package(*line.split("=", 1)) for line in entry.packages]
        versions = {p.name: p.version for p in packages}
        try:
            asked = load_recipe(name).packages
        except ImageError:
            asked = ()  # built here from a recipe this checkout no longer has
        label, package = RUNTIME_PACKAGES.get(name, (name, name))
        summaries.append(
            ImageSummary(
                name=name,
                digest=entry.digest,
                built_at=entry.built_at,
                runtime=f"{label} {upstream_version(versions[package])}" if package in versions else None,
                requested=[Package(p, versions[p]) for p in asked if p in versions],
                packages=packages,
            )
        )
    return summaries


def upstream_version(debian_version: str) -> str:
    """The upstream part of a Debian version: "1:18.19.0+dfsg-6~deb12u2" -> "18.19.0"."""
    version = debian_version.split(":", 1)[-1].rsplit("-", 1)[0]
    return version.split("+", 1)[0].split("~", 1)[0]
