"""Template filters for sizes and durations in the words people read (`{{ n|size }}` gives
"256 KiB", `{{ s|seconds }}` "2.5 s"), built in to every template (settings.TEMPLATES)."""

from __future__ import annotations

from typing import Any

from django import template

from runner.units import seconds_words, size_words

register = template.Library()


@register.filter
def size(count: Any) -> str:
    return "-" if count is None or count == "" else size_words(int(count))


@register.filter
def seconds(value: Any) -> str:
    return "-" if value is None or value == "" else seconds_words(float(value))
