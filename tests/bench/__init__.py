"""Benchmarks: `make bench` runs every `bench_*.py` here, prints one table and saves JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median


@dataclass(frozen=True)
class Row:
    benchmark: str
    metric: str
    value: float | None
    unit: str
    target: str = ""
    # "pass", "FAIL" or "" (no target): a target that is missed is shown, never hidden.
    verdict: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def targeted(
    benchmark: str, metric: str, value: float, unit: str, *, at_most: float | None = None,
    at_least: float | None = None,
) -> Row:  # fmt: skip
    """A row with its target and the verdict on it."""
    if at_most is not None:
        return Row(benchmark, metric, value, unit, f"<= {at_most:g}", "pass" if value <= at_most else "FAIL")
    if at_least is not None:
        return Row(benchmark, metric, value, unit, f">= {at_least:g}", "pass" if value >= at_least else "FAIL")
    return Row(benchmark, metric, value, unit)


def p50(values: list[float]) -> float:
    return median(values)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]
