"""What a notebook's editor completes at the cursor (playground.completion does the reading): from
the state the cell would start from (its owner's own runs: selectors.cells' chain), the index the
cell's image was built with, and the cell's code above the cursor. Reads only: never a run.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from playground.completion import Index, State, complete
from playground.models import Notebook
from playground.selectors.cells import CellChain, Source, notebook_chain
from runner.config import paths_from_env
from runner.images import INDEX_FILE, ImageError, ImageStore

log = logging.getLogger(__name__)

INDEX_MAX_BYTES = 64 << 20


def notebook_complete(
    *, notebook: Notebook, cell_id: str, code: str, cursor: int, above_cell_id: str | None = None
) -> dict[str, Any]:
    """The matches at `cursor` of `code` (the cell's text as the editor has it, saved or not) in
    cell `cell_id`; a cell the notebook does not hold yet (just added) starts where a cell below
    `above_cell_id` would, or without it where a new cell at the end would."""
    chain, last = notebook_chain(notebook=notebook)
    cell = next((c for c in notebook.cells if c["id"] == cell_id), None)
    source = chain[cell_id].starts_from if cell_id in chain else _below(notebook, chain, above_cell_id, last)
    runtime = cell["runtime"] if cell is not None and cell["kind"] == "code" else notebook.runtime
    record = source.run.cell if source is not None else None
    state = State.from_manifest(record.manifest if record is not None else {})
    if source is not None and source.run.runtime != runtime:
        state = State()  # a change of runtime starts from nothing
    return complete(code=code, cursor=cursor, runtime=runtime, state=state, index=image_index(runtime))


def _below(
    notebook: Notebook, chain: dict[str, CellChain], above_cell_id: str | None, last: Source | None
) -> Source | None:
    """The state a cell just below `above_cell_id` starts from: the next code cell's (one runs
    after it as the new cell would), or the notebook's last after the last code cell."""
    ids = [c["id"] for c in notebook.cells]
    if above_cell_id not in ids:
        return last
    below = ids[ids.index(above_cell_id) + 1 :]
    return next((chain[i].starts_from for i in below if i in chain), last)


def image_index(name: str) -> Index | None:
    """The completion index inside the image `name` this host built (None: not built here, or an
    image without one); read once per digest."""
    try:
        ref = ImageStore(paths_from_env()).resolve(name)
    except ImageError:
        return None
    return _index(ref.digest, ref.rootfs / INDEX_FILE)  # written by the build, under the image's digest


@lru_cache(maxsize=4)
def _index(digest: str, path: Path) -> Index | None:
    try:
        if path.stat().st_size > INDEX_MAX_BYTES:
            log.warning("completion index of %s is over %d bytes: not read", digest, INDEX_MAX_BYTES)
            return None
        return Index.from_json(json.loads(path.read_bytes()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("completion index of %s not read: %s", digest, exc)
        return None
