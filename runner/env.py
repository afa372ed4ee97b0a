"""Strict readers for environment variables, shared by the runner and the web settings.

A malformed value fails at start-up with a message naming the variable, never silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_TRUE = frozenset({"1", "true"})
_FALSE = frozenset({"0", "false"})


class ConfigError(ValueError):
    """An environment variable holds a value the program cannot use."""


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    """`true`/`false`/`1`/`0` (any case); anything else, such as `yes`, is an error."""
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name} must be one of true, false, 1, 0; got {value!r}")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """A base-10 integer, optionally bounded; `10k` or `1.5` is an error, not a guess."""
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = int(value, 10)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number; got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name} must be at least {minimum}; got {number}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{name} must be at most {maximum}; got {number}")
    return number


def env_float(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> float:
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number; got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ConfigError(f"{name} must be a finite number; got {value!r}")
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name} must be at least {minimum}; got {number}")
    return number


def env_str(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    value = _raw(name, environ)
    return default if value is None else value


def env_choice(name: str, default: str, choices: tuple[str, ...], *, environ: Mapping[str, str] | None = None) -> str:
    value = _raw(name, environ)
    if value is None:
        return default
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def env_list(name: str, default: list[str], *, environ: Mapping[str, str] | None = None) -> list[str]:
    """Comma-separated; empty items are dropped."""
    value = _raw(name, environ)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_path(name: str, default: Path, *, base: Path, environ: Mapping[str, str] | None = None) -> Path:
    """A path; a relative one is taken relative to `base` (the project root), not the cwd."""
    value = _raw(name, environ)
    path = default if value is None else Path(value)
    if not path.is_absolute():
        path = base / path
    return path


def load_env_file(path: Path) -> None:
    """Read `KEY=VALUE` lines from `path` (if it exists) into os.environ without overriding it.

    Blank lines and `#` comments are skipped; one pair of surrounding quotes is removed. This is
    the `.env` convention honcho also follows, so `make run`, manage.py and the runner agree.
    """
    if not path.is_file():
        return
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        key = key.removeprefix("export ").strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE, got {line!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        os.environ.setdefault(key, value)
