"""The guest images as this host built them, for the images page.

Read from this host's build record ($CORDON_IMAGES_DIR/built.json), the file runs resolve their
image by and /api/images lists: it changes the moment `make images` does. The RuntimeImage rows
are a copy of it taken at `make migrate`, which may lag behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count

from playground.environments import environments
from playground.models import STAFF_ROLES, Assignment, Notebook
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
    requested: list[Package]  # the packages its recipe asks for (its wheels as pip:name)
    packages: list[Package]  # every package in the image
    base: str | None = None  # the environment it extends
    description: str = ""
    notebooks: int = 0  # how many notebooks and assignments run in it
    assignments: int = 0
    # Of those, the viewer's own notebooks and the assignments of the courses they teach: (name, link).
    yours: tuple[tuple[str, str], ...] = ()

    @property
    def requested_names(self) -> str:
        return ", ".join(p.name for p in self.requested)


def image_list_built(viewer: Any = None) -> list[ImageSummary]:
    summaries = []
    users = _users()
    yours = _yours(viewer) if viewer is not None else {}
    for name, entry in sorted(read_lock().items()):
        packages = [Package(*line.split("=", 1)) for line in entry.packages]
        versions = {p.name: p.version for p in packages}
        try:
            recipe = load_recipe(name)
            asked = [*recipe.packages, *(f"pip:{r.name}" for r in recipe.requirements)]
            runtime, base, description = recipe.runtime, recipe.base, recipe.description
        except ImageError:  # built here from a recipe this checkout no longer has
            asked, runtime, base, description = [], name, None, ""
        label, package = RUNTIME_PACKAGES.get(runtime, (runtime, runtime))
        summaries.append(
            ImageSummary(
                name=name,
                digest=entry.digest,
                built_at=entry.built_at,
                runtime=f"{label} {upstream_version(versions[package])}" if package in versions else None,
                requested=[Package(p, versions[p]) for p in asked if p in versions],
                packages=packages,
                base=base,
                description=description,
                notebooks=users[0].get(name, 0),
                assignments=users[1].get(name, 0),
                yours=tuple(yours.get(name, ())),
            )
        )
    return summaries


def _yours(viewer: Any, most: int = 50) -> dict[str, list[tuple[str, str]]]:
    """The viewer's own notebooks, and the assignments of the courses they teach, by environment."""
    found: dict[str, list[tuple[str, str]]] = {}
    notebooks = Notebook.objects.filter(owner=viewer).exclude(environment="").order_by("name")
    for notebook_id, name, environment in notebooks.values_list("id", "name", "environment")[:most]:
        found.setdefault(environment, []).append((f"notebook {name}", f"/notebooks/{notebook_id}/"))
    taught = Assignment.objects.filter(course__memberships__user=viewer, course__memberships__role__in=STAFF_ROLES)
    for assignment_id, title, environment in (
        taught.exclude(environment="").order_by("title").values_list("id", "title", "environment")[:most]
    ):
        found.setdefault(environment, []).append((f"assignment {title}", f"/assignments/{assignment_id}/"))
    return found


def _users() -> tuple[dict[str, int], dict[str, int]]:
    """How many notebooks, and how many assignments, name each environment."""
    notebooks = Notebook.objects.exclude(environment="").values_list("environment").annotate(n=Count("id"))
    assignments = Assignment.objects.exclude(environment="").values_list("environment").annotate(n=Count("id"))
    return dict(notebooks), dict(assignments)


def upstream_version(debian_version: str) -> str:
    """The upstream part of a Debian version: "1:18.19.0+dfsg-6~deb12u2" -> "18.19.0"."""
    version = debian_version.split(":", 1)[-1].rsplit("-", 1)[0]
    return version.split("+", 1)[0].split("~", 1)[0]


def environment_list() -> list[dict[str, Any]]:
    """Every environment (playground.environments), with its image as this host built it and how
    many notebooks and assignments name it."""
    built = read_lock()
    notebooks, assignments = _users()
    rows = []
    for name, environment in sorted(environments().items()):
        entry = built.get(name)
        rows.append({
            "name": name, "runtime": environment.runtime, "base": environment.base,
            "description": environment.description, "wheels": list(environment.wheels),
            "digest": entry.digest if entry else None, "packages": list(entry.packages) if entry else [],
            "notebooks": notebooks.get(name, 0), "assignments": assignments.get(name, 0),
        })  # fmt: skip
    return rows
