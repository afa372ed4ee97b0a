"""CSV cells a spreadsheet shows as text (OWASP "CSV injection"): the audit console's export and
the classroom's gradebook both write them through `csv_cell`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

# A spreadsheet runs a cell starting with one of these as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell a spreadsheet shows as text: a string that would start a formula gets a
    leading apostrophe; numbers stay numbers."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
