"""Sizes and durations in the words people read."""

import pytest

from runner.units import seconds_words, size_words, size_words_or_unknown


@pytest.mark.parametrize(
    ("count", "said"),
    [(0, "0 bytes"), (1, "1 byte"), (1000, "1000 bytes"), (1024, "1 KiB"), (1 << 20, "1 MiB"),
     (64 << 20, "64 MiB"), ((64 << 20) + (64 << 10), "64.1 MiB"), (5 << 30, "5 GiB"), (1536, "1.5 KiB")],
)  # fmt: skip
def test_a_size_is_said_in_the_unit_that_holds_it(count: int, said: str) -> None:
    assert size_words(count) == said


def test_a_size_set_against_a_cap_says_its_bytes_when_its_unit_would_round_it_onto_the_cap() -> None:
    assert size_words(16385, exact=True) == "16 KiB (16,385 bytes)"
    assert size_words(16384, exact=True) == "16 KiB" and size_words(300, exact=True) == "300 bytes"


@pytest.mark.parametrize(
    ("seconds", "said"), [(0.25, "250 ms"), (2.5, "2.5 s"), (2.0, "2 s"), (90, "90 s"), (150, "2 min 30 s")]
)
def test_a_duration_is_said_in_the_unit_that_reads_best(seconds: float, said: str) -> None:
    assert seconds_words(seconds) == said


def test_a_size_not_given_is_said_to_be_unknown() -> None:
    assert size_words_or_unknown(None) == "of unknown size" and size_words_or_unknown(16385) == "16 KiB (16,385 bytes)"
