"""What the OpenAPI document says beyond what ninja derives from the code: each upload's `file`
as the server takes it (required, a file), and egress as this service's ceiling allows it when
the document is asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ninja import NinjaAPI

from playground.egress import WITHIN_SITE_CEILING, site_ceiling


def require_upload_files(document: dict[str, Any]) -> None:
    """ninja documents an upload's `file` as optional (null allowed), since the handler refuses a
    missing one itself, with its own message (422 file_required): the document says it is required."""
    for item in document["paths"].values():
        for operation in item.values():
            form = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data")
            if form is not None and "file" in form["schema"].get("properties", {}):
                form["schema"]["properties"]["file"] = {"type": "string", "format": "binary", "title": "File"}
                form["schema"]["required"] = ["file"]
                operation["requestBody"]["required"] = True


def _nodes(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _nodes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _nodes(item)


def apply_site_egress_ceiling(document: dict[str, Any]) -> None:
    """A policy marked as checked against this service's egress ceiling (egress.SiteEgressPolicy)
    is an empty list only while that ceiling allows nothing, as it does by default."""
    empty = not site_ceiling()
    for node in _nodes(document.get("components", {})):
        if node.pop(WITHIN_SITE_CEILING, False) and empty:
            node["maxItems"] = 0
            node["items"] = {"type": "string"}
            said = node.get("description", "")
            node["description"] = f"{said} (this service's egress ceiling allows none: only an empty list)".lstrip()


class DocumentedApi(NinjaAPI):
    """The API, its document completed by the functions above."""

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None) -> Any:
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        require_upload_files(document)
        apply_site_egress_ceiling(document)
        return document
