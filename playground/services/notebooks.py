"""Notebooks: several per user, each saved whole by the page with the version it read (a stale tab
gets notebook_conflict instead of overwriting newer work), cells checked before anything is stored.

A stored cell is {"id", "kind", "runtime", "source", "inputs", "limits", "egress", "last_run_id"} (a
cell stored before egress has none: its runs have no network, as with an empty policy), and a
markdown cell also its "html": rendered and sanitised when the cell is saved with a new source, in
a bounded child (playground.markdown.render_bounded), so that reading a notebook never renders
(a new sanitiser comes with a migration that renders the stored cells again). An input is a reference
{"kind": "dataset"|"output", "id", "name"} that keeps the name it was made with, so one whose
target is gone shows what it was. `last_run_id` is the server's: a cell's run sets it, clear
empties it, a save never changes it (a save racing a run cannot undo the run's record), with one
exception: a cell deleted and then brought back by the page's undo (same id) takes its last run
again, when that run is this notebook's run of that cell.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from pathlib import PurePosixPath
from typing import Any

from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import F
from django.http import Http404
from django.utils import timezone

from playground.egress import shape_problem
from playground.environments import check_environment, environment_for
from playground.errors import ServiceError
from playground.ipynb import MAX_CELLS, cells_from_ipynb, cells_from_script
from playground.limits import limits_from_record
from playground.markdown import SOURCE_MAX_BYTES as MARKDOWN_MAX_BYTES
from playground.markdown import render_bounded
from playground.models import ACTIVE_STATES, Dataset, Notebook, Run, RunCell, RunOutputFile
from playground.selectors.cells import notebook_chain
from playground.selectors.notebooks import input_key, inputs_found
from playground.services import runs as run_services
from playground.services.cells import cell_record_create
from playground.uploads import check_upload_size
from runner.spec import RUNTIMES
from runner.units import size_words

MAX_NOTEBOOKS = 100
SAVE_TRIES = 3  # a save races a cell's run at most this often before it says "changed elsewhere"
# All of a notebook's markdown together (a cell: MARKDOWN_MAX_BYTES): a book's worth, and what one
# save may ask to be rendered at most.
NOTEBOOK_MARKDOWN_MAX_BYTES = 1 << 20
MAX_INPUTS = 64
MAX_SOURCE_BYTES = run_services.MAX_CODE_BYTES
IMPORT_MAX_BYTES = 4 << 20
KINDS = ("code", "markdown")


def notebook_create(
    *,
    user: User,
    name: str,
    cells: list[dict[str, Any]] | None = None,
    dataset_ids: list[Any] | None = None,
    runtime: str | None = None,
    environment: str = "",
) -> Notebook:
    """A new notebook; its runtime (what a new code cell takes) is `runtime`, else its first code
    cell's, else python; its cells run in `environment` (playground.environments) where it fits."""
    if runtime is not None:
        runtime = _clean_runtime(runtime)
    environment = check_environment(environment)
    cells = cells if cells is not None else [_starter_cell(runtime or "python")]
    _check_markdown_total(cells)
    # Checked and rendered before the transaction: on SQLite its lock is the whole database's.
    clean = _clean_cells(user, cells, stored=[], html=_rendered(cells, stored=[]))
    runtime = runtime or next((c["runtime"] for c in clean if c["kind"] == "code"), "python")
    inputs = _notebook_inputs(user, dataset_ids, []) if dataset_ids else []
    name = _clean_name(name)
    with transaction.atomic():
        User.objects.select_for_update().get(pk=user.pk)  # the count and the insert cannot race
        if Notebook.objects.filter(owner=user).count() >= MAX_NOTEBOOKS:
            raise ServiceError("too_many_notebooks", f"at most {MAX_NOTEBOOKS} notebooks; delete one first", status=409)
        return Notebook.objects.create(
            owner=user,
            name=name,
            cells=clean,
            cell_count=len(clean),
            inputs=inputs,
            runtime=runtime,
            environment=environment,
        )


def notebook_default(*, user: User) -> Notebook:
    """The notebook the playground opens: the user's most recently changed one, or a new one."""
    with transaction.atomic():
        User.objects.select_for_update().get(pk=user.pk)  # two first visits at once make one notebook
        notebook = Notebook.objects.filter(owner=user).first()
        return notebook or notebook_create(user=user, name="Notebook 1")


def notebook_save(
    *,
    notebook: Notebook,
    name: str,
    version: int,
    cells: list[dict[str, Any]],
    dataset_ids: list[Any] | None = None,
    runtime: str | None = None,
    environment: str | None = None,
) -> Notebook:
    """Replace the name and cells, if `version` is still the stored one. The cells are checked and
    their markdown rendered against the cells stored now, then written by one conditional UPDATE,
    outside any transaction: on SQLite a transaction's lock is the whole database's, and one held
    over two hundred cells' checks, a render or the encoding of megabytes of JSON held up every
    other run's writes. A cell's run or clear in between (`runs_version`) is merged in again.
    `dataset_ids`, when given, are the notebook's own inputs (every code cell sees them); `runtime`,
    when given, what a new code cell takes; `environment`, when given, where its cells run."""
    html: dict[tuple[str, str], str] = {}
    name = _clean_name(name)
    runtime = _clean_runtime(runtime) if runtime is not None else None
    environment = check_environment(environment) if environment is not None else None
    _check_markdown_total(cells)
    for _ in range(SAVE_TRIES):
        stored = Notebook.objects.filter(id=notebook.id).values("cells", "version", "runs_version", "inputs").first()
        if stored is None:
            raise Http404("no such notebook")
        if stored["version"] != version:
            raise _conflict(stored["version"], version)
        html = _rendered(cells, stored=stored["cells"], known=html)
        clean = _clean_cells(notebook.owner, cells, stored=stored["cells"], html=html, notebook=notebook)
        inputs = (
            stored["inputs"] if dataset_ids is None else _notebook_inputs(notebook.owner, dataset_ids, stored["inputs"])
        )
        fields: dict[str, Any] = {"runtime": runtime} if runtime is not None else {}
        if environment is not None:
            fields["environment"] = environment
        changed = Notebook.objects.filter(id=notebook.id, version=version, runs_version=stored["runs_version"]).update(
            cells=clean, cell_count=len(clean), name=name, version=version + 1, updated_at=timezone.now(),
            inputs=inputs, **fields,
        )  # fmt: skip
        if changed:
            notebook.refresh_from_db()
            return notebook
    raise _conflict(None, version)


def _conflict(stored: int | None, version: int) -> ServiceError:
    now = f"version {stored}, " if stored is not None else ""
    return ServiceError(
        "notebook_conflict", f"this notebook was changed elsewhere ({now}this page had {version}); reload it to see "
        "the newer cells", field="version", status=409,
    )  # fmt: skip


def notebook_delete(*, notebook: Notebook) -> None:
    """Its runs stay: they are the audit trail, listed under Runs. The images its import kept go,
    unless a copy of it still shows them."""
    paths = {o["path"] for cell in notebook.cells for o in cell.get("imported", []) if "path" in o}
    notebook.delete()
    for path in paths:
        if not Notebook.objects.filter(owner=notebook.owner, cells__icontains=path).exists():
            default_storage.delete(path)


def notebook_duplicate(*, notebook: Notebook) -> Notebook:
    """A copy with the same cells and the same last runs (shown until the copy's cells run)."""
    with transaction.atomic():
        copy = notebook_create(user=notebook.owner, name=_copy_name(notebook.name), cells=[], runtime=notebook.runtime)
        current = _locked(notebook)
        copy.cells, copy.inputs, copy.environment = current.cells, current.inputs, current.environment
        copy.cell_count = len(copy.cells)
        copy.save(update_fields=["cells", "cell_count", "inputs", "environment"])
    return copy


def notebook_import(*, user: User, upload: UploadedFile) -> Notebook:
    """A .ipynb opens as a notebook of its code and markdown cells; a .py or .js script as a
    notebook with one code cell of that runtime."""
    name = PurePosixPath(upload.name or "").name
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in (".ipynb", ".py", ".js"):
        raise ServiceError(
            "unsupported_file", "import a .ipynb notebook or a .py or .js script", field="file", status=422
        )
    check_upload_size(upload, IMPORT_MAX_BYTES)
    data = upload.read()
    if suffix == ".ipynb":
        runtime, imported = cells_from_ipynb(data)
    else:
        runtime, imported = cells_from_script(name, data)
    cells: list[dict[str, Any]] = [
        {**cell, "id": f"c{index + 1}", "inputs": [], "limits": {}} for index, cell in enumerate(imported)
    ]
    outputs: dict[str, list[dict[str, Any]]] = {cell["id"]: cell.pop("outputs") for cell in cells if "outputs" in cell}
    name = PurePosixPath(name).stem[:100] or "Imported"
    notebook = notebook_create(user=user, name=name, cells=cells, runtime=runtime)
    if outputs:  # shown under their cells until those run; images stored like a run's
        for cell in notebook.cells:
            cell["imported"] = [_imported_output(output) for output in outputs.get(cell["id"], [])]
        Notebook.objects.filter(id=notebook.id).update(cells=notebook.cells)
    return notebook


def _imported_output(output: dict[str, Any]) -> dict[str, Any]:
    if "data" not in output:
        return output
    data = base64.b64decode(output.pop("data"))
    path = default_storage.save(f"imported/{secrets.token_hex(16)}", ContentFile(data))
    return {**output, "path": path, "size": len(data)}


def cell_run(*, notebook: Notebook, cell_id: str, engine: str = "auto") -> Run:
    """Run a code cell as stored, with the notebook's inputs and its own, from the state the cells
    above it left (selectors.cells), and record the run as the cell's last."""
    with transaction.atomic():
        current = _locked(notebook)
        index, cell = _find_cell(current, cell_id)
        if cell["kind"] != "code":
            raise ServiceError("not_code", f"cell {index + 1} is a markdown cell; only code cells run",
                               field="cell_id", status=422)  # fmt: skip
        own = {input_key(ref) for ref in cell["inputs"]}
        shared = [ref for ref in current.inputs if input_key(ref) not in own]
        refs = shared + cell["inputs"]
        found = inputs_found(user=current.owner, refs=refs)
        for ref in refs:
            if input_key(ref) not in found:
                where = "the notebook's" if ref in shared else f"cell {index + 1}:"
                position = current.inputs.index(ref) if ref in shared else cell["inputs"].index(ref)
                raise ServiceError(
                    "broken_input", f"{where} input {ref['name'] or ref['id']!r} no longer exists; "
                    "use the current one or remove it",
                    field=f"inputs.{position}" if ref in shared else f"cells.{index}.inputs.{position}", status=422,
                )  # fmt: skip
        starts_from = notebook_chain(notebook=current)[0][cell["id"]].starts_from
        run = run_services.run_create(
            user=current.owner, runtime=cell["runtime"], code=cell["source"],
            dataset_ids=[found[input_key(ref)].id for ref in refs if ref["kind"] == "dataset"],
            output_ids=[ref["id"] for ref in refs if ref["kind"] == "output"],
            limits=limits_from_record(cell["limits"]), engine=engine,
            egress=cell.get("egress") or (),  # checked against today's ceiling, as any run's
            environment=environment_for(current.environment, cell["runtime"]),
        )  # fmt: skip
        cell_record_create(run=run, notebook=current, cell_id=cell["id"],
                           state_from=starts_from.run if starts_from else None)  # fmt: skip
        cell["last_run_id"] = str(run.id)
        # Not a new version; a save that read the cells before this merges them again.
        Notebook.objects.filter(id=current.id).update(cells=current.cells, runs_version=F("runs_version") + 1)
    return run


def notebook_restart(*, notebook: Notebook) -> Notebook:
    """ "Restart (clear state)": every cell's run so far passes no state down; the cells run again
    start from nothing, top first. Their runs and outputs stay, shown as stale."""
    Notebook.objects.filter(id=notebook.id).update(restarted_at=timezone.now(), runs_version=F("runs_version") + 1)
    notebook.refresh_from_db()
    return notebook


def cell_clear(*, notebook: Notebook, cell_id: str) -> Notebook:
    """Forget the cell's last run (the run itself stays, under Runs); not while it is running."""
    with transaction.atomic():
        current = _locked(notebook)
        index, cell = _find_cell(current, cell_id)
        if Run.objects.filter(id=cell["last_run_id"], state__in=ACTIVE_STATES).exists():
            raise ServiceError("run_active", f"cell {index + 1} is running: stop it first, then clear it",
                               field="cell_id", status=409)  # fmt: skip
        cell["last_run_id"] = None
        Notebook.objects.filter(id=current.id).update(cells=current.cells, runs_version=F("runs_version") + 1)
    return current


# --- cells ---------------------------------------------------------------------------------


STARTERS = {"python": "print('hello')", "node": "console.log('hello')"}


def _starter_cell(runtime: str) -> dict[str, Any]:
    return {"id": "c1", "kind": "code", "runtime": runtime, "source": STARTERS[runtime], "inputs": [], "limits": {}}


def _clean_runtime(runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise ServiceError("unknown_runtime", "runtime must be python or node", field="runtime", status=422)
    return runtime


def _clean_name(name: str) -> str:
    name = " ".join(name.split())
    if not name or len(name) > 100:
        raise ServiceError("invalid_name", "a notebook's name is 1 to 100 characters", field="name", status=422)
    return name


def _copy_name(name: str) -> str:
    suffix = " (copy)"
    return name[: 100 - len(suffix)] + suffix


def _locked(notebook: Notebook) -> Notebook:
    """The notebook's row, locked for this transaction (gone if another tab deleted it)."""
    current = Notebook.objects.select_for_update().filter(id=notebook.id).first()
    if current is None:
        raise Http404("no such notebook")
    return current


def _find_cell(notebook: Notebook, cell_id: str) -> tuple[int, dict[str, Any]]:
    for index, cell in enumerate(notebook.cells):
        if cell["id"] == cell_id:
            return index, cell
    raise ServiceError("cell_not_found", f"this notebook has no cell {cell_id!r}", field="cell_id", status=404)


def _check_markdown_total(cells: list[dict[str, Any]]) -> None:
    """Before anything is rendered: all the markdown together within NOTEBOOK_MARKDOWN_MAX_BYTES."""
    total = sum(len(str(c.get("source", "")).encode()) for c in cells if c.get("kind") == "markdown")
    if total > NOTEBOOK_MARKDOWN_MAX_BYTES:
        raise ServiceError(
            "markdown_too_large", f"a notebook's markdown cells hold at most {size_words(NOTEBOOK_MARKDOWN_MAX_BYTES)} "
            f"together (these hold {size_words(total, exact=True)})", field="cells", status=422,
        )  # fmt: skip


def _clean_cells(
    user: User,
    cells: list[dict[str, Any]],
    *,
    stored: list[dict[str, Any]],
    html: dict[tuple[str, str], str],
    notebook: Notebook | None = None,
) -> list[dict[str, Any]]:
    """Check every cell; nothing half-valid is stored. References already stored are kept as
    they are (a broken one stays, shown as broken); a new one must name the user's own dataset or
    output, and takes its name. A markdown cell takes its HTML from `html` (_rendered's)."""
    if len(cells) > MAX_CELLS:
        raise ServiceError("too_many_cells", f"at most {MAX_CELLS} cells", field="cells", status=422)
    ids = [str(cell.get("id", "")) for cell in cells]
    if len(ids) != len(set(ids)):
        raise ServiceError("duplicate_cell_id", "two cells have the same id", field="cells", status=422)
    last_runs = {cell["id"]: cell.get("last_run_id") for cell in stored}
    if notebook is not None:
        last_runs.update(_undeleted_runs(notebook, cells, last_runs))
    imported = {cell["id"]: cell["imported"] for cell in stored if cell.get("imported")}
    known = {input_key(ref): ref for cell in stored for ref in cell.get("inputs", [])}
    clean = [_clean_cell(user, index, cell, last_runs.get(cell["id"]), known) for index, cell in enumerate(cells)]
    for cell in clean:  # the server's, as last_run_id: a save keeps what the import kept
        if cell["id"] in imported:
            cell["imported"] = imported[cell["id"]]
    markdown = [cell for cell in clean if cell["kind"] == "markdown"]
    html = _rendered(markdown, stored=stored, known=html)  # renders only a cell changed since `html` was made
    for cell in markdown:
        cell["html"] = html[(str(cell["id"]), cell["source"])]
    return clean


def _undeleted_runs(notebook: Notebook, cells: list[dict[str, Any]], stored: dict[str, str | None]) -> dict[str, str]:
    """The last runs of cells a save brings back (an id the stored cells lack, with the last_run_id
    the page kept): each only if the run is this notebook's run of that very cell (RunCell says)."""
    asked = {}
    for cell in cells:
        cell_id = str(cell.get("id", ""))
        try:
            run_id = str(uuid.UUID(str(cell.get("last_run_id"))))
        except ValueError:
            continue
        if cell_id not in stored and cell.get("kind", "code") == "code":
            asked[run_id] = cell_id
    if not asked:
        return {}
    found = RunCell.objects.filter(run_id__in=list(asked)[:MAX_CELLS], notebook=notebook)
    return {cell_id: str(run_id) for run_id, cell_id in found.values_list("run_id", "cell_id")
            if asked.get(str(run_id)) == cell_id}  # fmt: skip


def _rendered(
    cells: list[dict[str, Any]], *, stored: list[dict[str, Any]], known: dict[tuple[str, str], str] | None = None
) -> dict[tuple[str, str], str]:
    """The HTML of each markdown cell, by (id, source): the stored cell's when its source is the
    same, else rendered, all of these new sources in one bounded child. Cells over the cap are left
    out (their save is refused)."""
    html = dict(known or {})
    html.update({(str(c["id"]), c["source"]): c["html"] for c in stored if c.get("kind") == "markdown" and "html" in c})
    new = {
        key: source for cell in cells if cell.get("kind") == "markdown"
        and isinstance(source := cell.get("source", ""), str) and len(source.encode()) <= MARKDOWN_MAX_BYTES
        and (key := (str(cell.get("id", "")), source)) not in html
    }  # fmt: skip
    html.update(zip(new, render_bounded(list(new.values())), strict=True))
    return html


def _clean_cell(
    user: User, index: int, cell: dict[str, Any], last_run_id: str | None, known: dict[tuple[str, str], Any]
) -> dict[str, Any]:
    where = f"cells.{index}"
    kind = cell.get("kind", "code")
    if kind not in KINDS:
        raise ServiceError("invalid_cell", f"cell {index + 1}: kind must be code or markdown",
                           field=f"{where}.kind", status=422)  # fmt: skip
    if cell.get("runtime") not in RUNTIMES:
        raise ServiceError("unknown_runtime", f"cell {index + 1}: runtime must be python or node",
                           field=f"{where}.runtime", status=422)  # fmt: skip
    source = str(cell.get("source", ""))
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        raise ServiceError("code_too_large", f"cell {index + 1}: source is over {size_words(MAX_SOURCE_BYTES)}",
                           field=f"{where}.source", status=422)  # fmt: skip
    if "\0" in source:  # an imported notebook's cell may hold one; no text stored can
        raise ServiceError("invalid_cell", f"cell {index + 1}: source contains a NUL character",
                           field=f"{where}.source", status=422)  # fmt: skip
    if kind == "markdown" and size > MARKDOWN_MAX_BYTES:
        raise ServiceError(
            "markdown_too_large", f"cell {index + 1}: a markdown cell is at most {size_words(MARKDOWN_MAX_BYTES)} "
            f"(this one is {size_words(size, exact=True)})", field=f"{where}.source", status=422,
        )  # fmt: skip
    # Only the limits set for the cell are kept (checked for range and type by the API's schema,
    # and against today's maxima when the cell runs); the others take their defaults then.
    limits = limits_from_record(dict(cell.get("limits") or {}))  # refuses a name that is no limit
    set_names = set(cell.get("limits") or {})
    clean: dict[str, Any] = {
        "id": cell["id"], "kind": kind, "runtime": cell["runtime"], "source": source,
        "inputs": _clean_inputs(user, index, cell.get("inputs") or [], known),
        "limits": {k: v for k, v in limits.to_json().items() if k in set_names},
        "egress": _clean_egress(index, cell.get("egress")), "last_run_id": last_run_id,
    }  # fmt: skip
    return clean


def _clean_egress(index: int, rules: Any) -> list[str]:
    """A cell's egress policy, checked for shape only: the rules and the ceiling are checked when
    the cell runs (the API's schema checks the same for a save; this guards other callers)."""
    rules = [] if rules is None else rules
    problem = shape_problem(rules)
    if problem is not None:
        raise ServiceError("egress_invalid", f"cell {index + 1}: {problem}", field=f"cells.{index}.egress", status=422)
    return list(rules)


def _clean_inputs(
    user: User, index: int, refs: list[dict[str, Any]], known: dict[tuple[str, str], Any]
) -> list[dict[str, Any]]:
    if len(refs) > MAX_INPUTS:
        raise ServiceError("too_many_inputs", f"cell {index + 1}: at most {MAX_INPUTS} inputs",
                           field=f"cells.{index}.inputs", status=422)  # fmt: skip
    if not refs:  # most cells: no query
        return []
    unique = list({input_key(ref): ref for ref in refs}.values())
    found = inputs_found(user=user, refs=unique)
    clean = []
    for position, ref in enumerate(unique):
        target = found.get(input_key(ref))
        if target is not None:
            clean.append({"kind": ref["kind"], "id": _id(ref), "name": _input_name(target)})
        elif input_key(ref) in known:  # stored before, gone since: kept, shown as broken
            clean.append(known[input_key(ref)])
        elif (purged := _purged_output(user, ref)) is not None:  # the user's, its file since purged
            clean.append({"kind": "output", "id": purged.id, "name": _input_name(purged)})
        else:
            raise ServiceError(
                "input_not_found", f"cell {index + 1}: no {ref['kind']} {ref['id']} of yours",
                field=f"cells.{index}.inputs.{position}", status=404,
            )  # fmt: skip
    return clean


def _notebook_inputs(user: User, dataset_ids: list[Any], stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The notebook's own inputs: the user's datasets by id, a stored one kept as it is (broken
    if it was deleted since)."""
    if len(dataset_ids) > MAX_INPUTS:
        raise ServiceError("too_many_inputs", f"a notebook has at most {MAX_INPUTS} inputs of its own",
                           field="dataset_ids", status=422)  # fmt: skip
    refs = [{"kind": "dataset", "id": str(i), "name": ""} for i in dict.fromkeys(map(str, dataset_ids))]
    found = inputs_found(user=user, refs=refs)
    known = {input_key(ref): ref for ref in stored}
    clean = []
    for position, ref in enumerate(refs):
        target = found.get(input_key(ref))
        if target is not None:
            clean.append({"kind": "dataset", "id": str(target.id), "name": _input_name(target)})
        elif input_key(ref) in known:
            clean.append(known[input_key(ref)])
        else:
            raise ServiceError("input_not_found", f"no dataset {ref['id']} of yours", field=f"dataset_ids.{position}",
                               status=404)  # fmt: skip
    names = [ref["name"] for ref in clean]
    if len(names) != len(set(names)):
        raise ServiceError("duplicate_input_name", "two of the notebook's inputs have the same name",
                           field="dataset_ids", status=422)  # fmt: skip
    return clean


def _id(ref: dict[str, Any]) -> Any:
    return int(ref["id"]) if ref["kind"] == "output" else str(ref["id"])


def _input_name(target: Dataset | RunOutputFile) -> str:
    """The name the input has under /input (an output's last path part, as staging names it)."""
    return target.name if isinstance(target, Dataset) else target.name.rsplit("/", 1)[-1]


def _purged_output(user: User, ref: dict[str, Any]) -> RunOutputFile | None:
    if ref["kind"] != "output":
        return None
    return RunOutputFile.objects.filter(run__in=Run.objects.own(user), id=int(ref["id"]), file="").first()
