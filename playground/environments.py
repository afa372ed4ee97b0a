"""The environments a run, a notebook or an assignment may name: the guest images' recipes
(images/<name>/recipe.toml, runner.images), each for one runtime, some extending another with
Debian packages or wheels pinned by hash. Read from the recipes, again only when one changed;
whether an environment is built is the worker host's to say (a run of one it has not built ends
sandbox_error, image_unavailable, saying `make images`). The web only lists and checks; building is an operator's
act (`python -m runner images build NAME`, `make images`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from playground.errors import ServiceError
from runner.config import RECIPES_DIR
from runner.images import ImageError, load_recipe, recipe_names
from runner.spec import PACKAGES_ELSEWHERE_MAX_CHARS


@dataclass(frozen=True)
class Environment:
    name: str
    runtime: str
    base: str | None
    description: str
    wheels: tuple[str, ...]  # name==version, as its requirements pin them


_lock = threading.Lock()
_cache: tuple[tuple[tuple[str, int], ...], dict[str, Environment]] | None = None


def environments() -> dict[str, Environment]:
    """Every environment whose recipe reads, by name (a recipe that does not read is left out:
    `python -m runner images build` says what is wrong with it)."""
    global _cache
    stamp = _stamp()
    with _lock:
        if _cache is not None and _cache[0] == stamp:
            return _cache[1]
    found = {}
    for name in recipe_names(RECIPES_DIR):
        try:
            recipe = load_recipe(name, RECIPES_DIR)
        except ImageError:
            continue
        wheels = tuple(r.pin for r in recipe.requirements)
        found[name] = Environment(name, recipe.runtime, recipe.base, recipe.description, wheels)
    with _lock:
        _cache = (stamp, found)
    return found


def _stamp() -> tuple[tuple[str, int], ...]:
    """The recipes' files and their change times: what makes the cache stale."""
    paths = sorted(p for p in RECIPES_DIR.glob("*/*") if p.is_file())
    return tuple((str(p), p.stat().st_mtime_ns) for p in paths)


def check_environment(name: str, runtime: str | None = None, *, field: str = "environment") -> str:
    """`name` when it is an environment (of `runtime`, when given); blank stays blank (the
    runtime's own image). Else a 422 that names the environments there are."""
    if not name:
        return ""
    known = environments()
    if name not in known:
        names = ", ".join(sorted(known)) or "none"
        raise ServiceError("unknown_environment", f"no environment is called {name!r}; there are: {names}",
                           field=field, status=422)  # fmt: skip
    if runtime is not None and known[name].runtime != runtime:
        fitting = ", ".join(sorted(n for n, e in known.items() if e.runtime == runtime)) or "none"
        raise ServiceError(
            "environment_runtime", f"{name} is a {known[name].runtime} environment; for {runtime}: {fitting}",
            field=field, status=422,
        )  # fmt: skip
    return name


def environment_for(environment: str, runtime: str) -> str:
    """What a program of `runtime` runs in where `environment` is chosen (a notebook's, an
    assignment's): that environment when it is of this runtime and still there, else blank (the
    runtime's own image: a notebook's node cell in a python environment)."""
    known = environments().get(environment) if environment else None
    return environment if known is not None and known.runtime == runtime else ""


def image_for(environment: str, runtime: str) -> str | None:
    """The image a program of `runtime` runs in under `environment`: the environment's when it is
    of that runtime (a notebook's node cell in a python environment runs in node's own), else None
    (the runtime's own image)."""
    chosen = environment_for(environment, runtime)
    return chosen if chosen and chosen != runtime else None


def packages_elsewhere(environment: str) -> str:
    """What a cell's `%pip install x` is told (runner.spec.RunSpec.packages_elsewhere): each wheel of
    the python environments other than `environment`, and which have it ("polars=python-data;...");
    at most PACKAGES_ELSEWHERE_MAX_CHARS, whole entries."""
    where: dict[str, list[str]] = {}
    for name, known in sorted(environments().items()):
        if known.runtime == "python" and name != environment:
            for wheel in known.wheels:
                where.setdefault(wheel.split("==")[0], []).append(name)
    told = ""
    for package, places in sorted(where.items()):
        entry = f"{package}={','.join(places)}"
        if len(told) + len(entry) + 1 > PACKAGES_ELSEWHERE_MAX_CHARS:
            break
        told = f"{told};{entry}" if told else entry
    return told
