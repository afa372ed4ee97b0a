"""Run every benchmark module, print the rows as a table, save them as JSON under var/bench/."""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from runner.config import paths_from_env
from tests.bench import Row

HERE = Path(__file__).parent


def main() -> int:
    names = sorted(p.stem for p in HERE.glob("bench_*.py"))
    wanted = sys.argv[1:]
    rows: list[Row] = []
    for name in names:
        if wanted and name.removeprefix("bench_") not in wanted:
            continue
        module = importlib.import_module(f"tests.bench.{name}")
        started = time.monotonic()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.extend(module.run())
        print(f"  {name} took {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    _print_table(rows)
    out_dir = paths_from_env().data_dir / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {"at": stamp, "host": platform.node(), "rows": [r.as_dict() for r in rows]}
    for path in (out_dir / f"bench-{stamp}.json", out_dir / "latest.json"):
        path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nsaved {out_dir / f'bench-{stamp}.json'}")
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


def _print_table(rows: list[Row]) -> None:
    header = ("benchmark", "metric", "value", "unit", "target", "verdict")
    table = [header] + [
        (r.benchmark, r.metric, "unknown" if r.value is None else f"{r.value:.4g}", r.unit, r.target, r.verdict)
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for index, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))


if __name__ == "__main__":
    sys.exit(main())
