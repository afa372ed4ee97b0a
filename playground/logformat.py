"""Log lines as JSON, one object a line (CORDON_LOG_FORMAT=json, the default): what a log shipper
(Loki, Elasticsearch, CloudWatch) indexes without a parsing rule.

Every line has time (UTC, ISO 8601), level, logger and message; an event's (playground.observe)
also its name and fields: run, user, host, engine and what the event says. A traceback is one
string field. Nothing else of the record is written: its fields are chosen, never user data.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "cordon", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)
