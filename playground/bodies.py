"""Request bodies: a byte cap per route, enforced before a body is read (by the server, see
playground/server.py, and again inside Django for any other server), multipart files streamed
to disk with the cap enforced as they arrive, JSON parsed strictly, and read strictly: `BodyIn`
and the types below, the base of every JSON object the API takes."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, ClassVar

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler
from django.http import HttpRequest
from ninja.parser import Parser
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator
from pydantic_core import PydanticCustomError

from runner.units import size_words

# Room for the multipart framing around an upload's bytes (boundaries, part headers).
MULTIPART_SLACK_BYTES = 64 * 1024
# The one route that takes a file, and so a larger body.
UPLOAD_ROUTES = frozenset({("POST", "/api/datasets")})
# The most a whole number in a body may be: what a 64-bit column holds. Each field that takes one
# is bounded within it (and the document says so); the parser reads any integer, since a field
# the server ignores may hold one of any size.
JSON_INT_MAX = (1 << 63) - 1
# Python's own limit on an integer's digits (int_max_str_digits), refused with a clear message.
JSON_INT_DIGITS_MAX = 4300
# Beyond this, not every whole number has a float of its own.
FLOAT_EXACT_MAX = 1 << 53


class BodyTooLarge(Exception):
    def __init__(self, cap: int, what: str = "the request body", field: str | None = None):
        super().__init__(f"{what} is over the {size_words(cap)} limit")
        self.cap, self.field = cap, field


class MalformedJson(ValueError):
    pass


def body_cap(method: str, path: str) -> int:
    """The most bytes a request body may have on this route."""
    if (method.upper(), path.rstrip("/")) in UPLOAD_ROUTES:
        return int(settings.CORDON_DATASET_MAX_BYTES) + MULTIPART_SLACK_BYTES
    return int(settings.CORDON_REQUEST_MAX_BYTES)


class CappedUploadHandler(FileUploadHandler):
    """First of the upload handlers: refuses a body over its route's cap from its
    Content-Length, and a file over the dataset cap as its bytes arrive, so neither is read to
    the end. The handlers after it write the file to disk (TemporaryFileUploadHandler)."""

    def handle_raw_input(
        self, input_data: Any, META: dict[str, Any], content_length: int, boundary: Any, encoding: Any = None
    ) -> None:
        cap = body_cap(str(META.get("REQUEST_METHOD", "")), self.request.path if self.request else "")
        if content_length > cap:
            raise BodyTooLarge(cap)
        self.file_bytes = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.file_bytes = start + len(raw_data)
        cap = int(settings.CORDON_DATASET_MAX_BYTES)
        if self.file_bytes > cap:
            raise BodyTooLarge(cap, "the file", field=self.field_name)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


class StrictJsonParser(Parser):
    """JSON as the RFC has it: no NaN or Infinity, and no text that is not Unicode (a lone UTF-16
    surrogate), refused with a clear message."""

    def parse_body(self, request: HttpRequest) -> Any:
        try:
            data = json.loads(request.body, parse_constant=_no_constant, parse_int=_integer, parse_float=_whole_as_int)
        except UnicodeDecodeError as exc:
            raise MalformedJson(f"the body is not UTF-8: {exc.reason}") from exc
        _check_text(data)
        return data


def _no_constant(name: str) -> Any:
    raise MalformedJson(f"{name} is not a JSON number; send a finite number")


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > JSON_INT_DIGITS_MAX:
        raise MalformedJson(f"the number {text[:24]}... has more than {JSON_INT_DIGITS_MAX} digits")
    return int(text)


def _whole_as_int(text: str) -> int | float:
    """5.0 is the number 5, as JSON Schema has it (an "integer" field takes it); exact up to 2**53."""
    value = float(text)
    return int(value) if value.is_integer() and abs(value) <= FLOAT_EXACT_MAX else value


def _check_text(value: Any) -> None:
    """Every string (keys too) must encode as UTF-8; json.loads lets lone surrogates through."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise MalformedJson(
                    "the body holds a lone UTF-16 surrogate (\\ud800-\\udfff without its pair); text must be Unicode"
                ) from exc
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# --- reading a parsed body ---------------------------------------------------------------


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words (for a refusal's message)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


class BodyIn(BaseModel):
    """A JSON object the API reads: a request body, or an object within one. Not ninja's Schema,
    which is made to read Django objects by their attributes and so read the body "AAA" as a
    course titled "AAA".title(): this takes a JSON object and nothing else. A field it does not
    know is refused (422, naming it): a misspelt field would otherwise run with its default.

    `answered_by`: what a GET answers of the same thing. Its fields that are not this body's
    (an id, a rendering, a count) may come back as the GET gave them, and are dropped unread: a
    script may read, change and send back; any other unknown field is still refused."""

    model_config = ConfigDict(extra="forbid")
    answered_by: ClassVar[type[BaseModel] | None] = None

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, data: Any) -> Any:
        if not isinstance(data, dict | BaseModel):
            raise PydanticCustomError("json_object", "must be a JSON object, not {kind}", {"kind": json_kind(data)})
        if cls.answered_by is not None and isinstance(data, dict):
            answered_only = cls.answered_by.model_fields.keys() - cls.model_fields.keys()
            data = {key: value for key, value in data.items() if key not in answered_only}
        return data


def _iso_text(value: Any) -> Any:
    if not isinstance(value, str):
        raise PydanticCustomError(
            "json_text", "must be a date and time as ISO 8601 text, not {kind}", {"kind": json_kind(value)}
        )
    return value


# JSON's own types, taken as they are. Pydantic's lax mode would read true as 1, "3" as 3 and
# "yes" as true; its strict mode (model-wide) would refuse a date or an id sent as text, which
# is how JSON sends them. So strictness is per type, and every body field uses these. (Strict()
# alone, with no validator function: the bounds a field adds, such as Field(ge=1, le=100), still
# appear in the document as minimum and maximum. Give every whole number its bounds, within
# JSON_INT_MAX.)
Int = Annotated[int, Strict()]
Number = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]
# A date and time as ISO 8601 text (pydantic would also take a number, as seconds since 1970).
DateTime = Annotated[datetime, BeforeValidator(_iso_text)]

# Patterns a field's text must match, as the document gives them, and the API's words for a miss.
# A NUL character is in no text the API takes: no program, title or answer needs one, and a
# database's text (PostgreSQL's) cannot hold it. Every free text field says so in the document.
NOT_BLANK = r"^[^\x00]*[^\x00\s][^\x00]*$"
NO_NUL = r"^[^\x00]*$"
PATTERN_WORDS = {
    NOT_BLANK: "must not be blank (nor contain a NUL character)",
    NO_NUL: "must not contain a NUL character",
}
Text = Annotated[str, Field(pattern=NO_NUL)]
