"""Public notebooks, run here by Jupyter and by Cordon, compared cell by cell: how many code cells
print Jupyter's text and show as many figures (tests/notebooks/compare.py says what is masked).

    /usr/bin/python3 tests/notebooks/public.py jupyter SOURCE_DIR REFERENCE_DIR
    .venv/bin/python -m tests.notebooks.public cordon REFERENCE_DIR

The first runs each .ipynb in SOURCE_DIR with Debian's Jupyter (the image's own libraries; see
make_references.py) and writes what it printed to REFERENCE_DIR. The second starts Cordon as
`make bench` does (web server, Redis, Celery worker), imports each reference, runs its code cells
top to bottom through the API (each its own sandbox), exports it, and compares; it prints a table
and the cells that differ, and saves them as JSON under var/notebooks/. The notebooks themselves
are not part of the project (their text is under its authors' licence): fetch them to a folder.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

CELL_TIMEOUT_S = 300


def run_with_jupyter(source: Path, out: Path) -> None:
    import nbformat
    from nbclient import NotebookClient  # type: ignore[import-not-found]  # Debian's Jupyter, not the venv's

    out.mkdir(parents=True, exist_ok=True)
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
        nbformat.write(notebook, out / path.name)
        print(f"{path.name}: run by Jupyter in {time.monotonic() - started:.1f} s", file=sys.stderr)


def run_with_cordon(references: Path) -> dict[str, Any]:
    from tests.bench.bench_web import Stack
    from tests.notebooks.compare import differences

    stack = Stack()
    results: dict[str, Any] = {}
    try:
        for path in sorted(references.glob("*.ipynb")):
            theirs = json.loads(path.read_text())
            started = time.monotonic()
            notebook = _import(stack, path)
            for cell in notebook["cells"]:
                if cell["kind"] == "code":
                    run = stack.call("POST", f"/api/notebooks/{notebook['id']}/cells/{cell['id']}/run")
                    stack.wait_finished(run["id"], timeout=CELL_TIMEOUT_S)
            ours = _export(stack, notebook["id"])
            found = differences(theirs, ours)
            cells = sum(1 for cell in theirs["cells"] if cell["cell_type"] == "code")
            results[path.name] = {"cells": cells, "differ": found, "seconds": time.monotonic() - started}
            print(f"{path.name}: {cells - len(found)}/{cells} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    finally:
        stack.close()
    return results


def _import(stack: Any, path: Path) -> Any:
    import urllib.request

    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
            "Content-Type: application/x-ipynb+json\r\n\r\n"
        ).encode()
        + path.read_bytes()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.port}/api/notebooks/import", method="POST", data=body,
        headers={"Authorization": f"Bearer {stack.token}", "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=90) as response:  # noqa: S310 - our own http URL
        return json.loads(response.read())


def _export(stack: Any, notebook_id: str) -> Any:
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.port}/api/notebooks/{notebook_id}/ipynb",
        headers={"Authorization": f"Bearer {stack.token}"},
    )
    with urllib.request.urlopen(request, timeout=90) as response:  # noqa: S310 - our own http URL
        return json.loads(response.read())


def report(results: dict[str, Any]) -> None:
    total = sum(r["cells"] for r in results.values())
    same = sum(r["cells"] - len(r["differ"]) for r in results.values())
    width = max(len(name) for name in results)
    for name, result in results.items():
        print(f"{name.ljust(width)}  {result['cells'] - len(result['differ']):>3}/{result['cells']:<3}")
    print(f"{'all'.ljust(width)}  {same:>3}/{total:<3}  {100 * same / max(total, 1):.1f}%")
    for name, result in results.items():
        for difference in result["differ"]:
            print(f"\n{name}: {difference}")


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
