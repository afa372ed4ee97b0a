"""Sizes and durations as a person reads them, for the messages people read (a cap that stopped a
run, a limit an upload passed). The API keeps exact numbers in its fields; its words use these."""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB")


def size_words(count: int, *, exact: bool = False) -> str:
    """Binary units, whole when whole ("1 MiB", "64 KiB"), else to a tenth ("64.1 MiB"); under
    1 KiB in bytes ("300 bytes", "1 byte"). `exact`: a size set against a cap, which a tenth could
    round onto it, also says its bytes when the unit does not hold it whole ("16 KiB (16,385 bytes)")."""
    if count < 1024:
        return f"{count} byte{'' if count == 1 else 's'}"
    value, whole, index = count / 1024, 1024, 0
    while value >= 1024 and index < len(_UNITS) - 1:
        value, whole, index = value / 1024, whole * 1024, index + 1
    said = f"{_figure(value)} {_UNITS[index]}"
    return f"{said} ({count:,} bytes)" if exact and count % whole else said


def size_words_or_unknown(count: int | None) -> str:
    """A size set against a cap (as size_words(exact=True)), or "of unknown size" when none was given."""
    return "of unknown size" if count is None else size_words(count, exact=True)


def seconds_words(seconds: float) -> str:
    """ "250 ms", "2.5 s", "90 s", "2 min 30 s"."""
    if seconds < 1:
        return f"{_figure(seconds * 1000, places=0)} ms"
    if seconds < 120:
        return f"{_figure(seconds)} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min" + (f" {rest} s" if rest else "")


def _figure(value: float, places: int = 1) -> str:
    text = f"{value:.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
