"""Public notebooks, run here by Jupyter and by Cordon, compared cell by cell: how many code cells
print Jupyter's text and show as many figures (tests/notebooks/compare.py says what is masked).

    /usr/bin/python3 tests/notebooks/public.py jupyter SOURCE_DIR REFERENCE_DIR
    .venv/bin/python -m tests.notebooks.public cordon REFERENCE_DIR

The first runs each .ipynb in SOURCE_DIR twice with Debian's Jupyter (the image's own libraries;
see make_references.py) and writes what it printed to REFERENCE_DIR (and REFERENCE_DIR/again): a
cell whose text differs between Jupyter's own two runs (unseeded randomness, uninitialised memory)
cannot be expected to print Jupyter's text, and is counted apart. The second starts Cordon as
`make bench` does (web server, Redis, Celery worker), imports each reference, gives its code cells
the limits a heavy notebook needs (CELL_LIMITS: the defaults stop a cell at 10 s), runs them top to
bottom through the API (each its own sandbox), exports it, and compares; it prints a table, the
cells that differ and the outcomes that were not success, and saves them as JSON under
var/notebooks/. The notebooks themselves
are not part of the project (their text is under its authors' licence): fetch them to a folder.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CELL_TIMEOUT_S = 300
CELL_LIMITS = {"wall_timeout_s": 120, "cpu_time_s": 120, "memory_mib": 4096, "state_max_bytes": 1 << 30}


def run_with_jupyter(source: Path, out: Path) -> None:
    import nbformat
    from nbclient import NotebookClient  # type: ignore[import-not-found]  # Debian's Jupyter, not the venv's

    for folder in (out, out / "again"):
        folder.mkdir(parents=True, exist_ok=True)
        for path in sorted(source.glob("*.ipynb")):
            notebook = nbformat.read(path, 4)
            for cell in notebook.cells:
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = [], None
            with tempfile.TemporaryDirectory() as cwd:
                client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=True,
                                        resources={"metadata": {"path": cwd}})  # fmt: skip
                started = time.monotonic()
                client.execute()
            nbformat.write(notebook, folder / path.name)
            print(f"{path.name}: run by Jupyter in {time.monotonic() - started:.1f} s", file=sys.stderr)


def run_with_cordon(references: Path) -> dict[str, Any]:
    from tests.bench.bench_web import Stack
    from tests.notebooks.compare import differing_cells

    stack = Stack()
    results: dict[str, Any] = {}
    try:
        for path in sorted(references.glob("*.ipynb")):
            theirs = json.loads(path.read_text())
            again = json.loads((references / "again" / path.name).read_text())
            unsteady = set(differing_cells(theirs, again))  # Jupyter against Jupyter
            started = time.monotonic()
            notebook = _with_limits(
                stack,
                stack.post_file("/api/notebooks/import", path.name, path.read_bytes(), "application/x-ipynb+json"),
            )
            outcomes = []
            for number, cell in enumerate((c for c in notebook["cells"] if c["kind"] == "code"), 1):
                run = stack.call("POST", f"/api/notebooks/{notebook['id']}/cells/{cell['id']}/run")
                ended = stack.wait_finished(run["id"], timeout=CELL_TIMEOUT_S)
                if ended["outcome"] not in ("succeeded", "failed"):
                    outcomes.append(f"code cell {number}: {ended['outcome']}: {ended['reason']}")
            found = differing_cells(theirs, _export(stack, notebook["id"]))
            steady = [d for number, d in found.items() if number not in unsteady]
            cells = sum(1 for cell in theirs["cells"] if cell["cell_type"] == "code")
            results[path.name] = {"cells": cells, "unsteady": len(unsteady), "differ": steady,
                                  "differ_unsteady": len(found) - len(steady), "outcomes": outcomes,
                                  "seconds": time.monotonic() - started}  # fmt: skip
            took = time.monotonic() - started
            print(f"{path.name}: {cells - len(unsteady) - len(steady)}/{cells - len(unsteady)} "
                  f"({len(unsteady)} unsteady in Jupyter) in {took:.1f} s", file=sys.stderr)  # fmt: skip
    finally:
        stack.close()
    return results


def _with_limits(stack: Any, notebook: Any) -> Any:
    cells = [{**cell, "limits": CELL_LIMITS} if cell["kind"] == "code" else cell for cell in notebook["cells"]]
    body = {"name": notebook["name"], "version": notebook["version"], "cells": cells}
    return stack.call("PUT", f"/api/notebooks/{notebook['id']}", body)


def _export(stack: Any, notebook_id: str) -> Any:
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.port}/api/notebooks/{notebook_id}/ipynb",
        headers={"Authorization": f"Bearer {stack.token}"},
    )
    with urllib.request.urlopen(request, timeout=90) as response:  # noqa: S310 - our own http URL
        return json.loads(response.read())


def report(results: dict[str, Any]) -> None:
    """Per notebook: the cells that print Jupyter's text of those Jupyter prints the same each time,
    and the cells Jupyter's own two runs disagree on; then the total, the differences, the ends."""
    width = max(len(name) for name in results)
    print(f"{'notebook'.ljust(width)}  {'same':>7}  unsteady in Jupyter (of them, same)")
    for name, r in results.items():
        steady = r["cells"] - r["unsteady"]
        print(f"{name.ljust(width)}  {steady - len(r['differ']):>3}/{steady:<3}  {r['unsteady']} "
              f"({r['unsteady'] - r['differ_unsteady']})")  # fmt: skip
    steady = sum(r["cells"] - r["unsteady"] for r in results.values())
    same = steady - sum(len(r["differ"]) for r in results.values())
    unsteady = sum(r["unsteady"] for r in results.values())
    cells = sum(r["cells"] for r in results.values())
    print(f"{'all'.ljust(width)}  {same:>3}/{steady:<3}  {unsteady}  = {100 * same / max(steady, 1):.1f}% of the "
          f"{steady} cells Jupyter prints the same each time ({cells} code cells in all)")  # fmt: skip
    for name, result in results.items():
        for difference in result["differ"]:
            print(f"\n{name}: {difference}")
        for outcome in result["outcomes"]:
            print(f"\n{name}: {outcome}")


def main(argv: list[str]) -> int:
    if argv[1:2] == ["jupyter"] and len(argv) == 4:
        run_with_jupyter(Path(argv[2]), Path(argv[3]))
        return 0
    if argv[1:2] == ["cordon"] and len(argv) == 3:
        from runner.config import paths_from_env

        results = run_with_cordon(Path(argv[2]))
        report(results)
        out = paths_from_env().data_dir / "notebooks"
        out.mkdir(parents=True, exist_ok=True)
        (out / "public.json").write_text(json.dumps(results, indent=2) + "\n")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
