from pathlib import Path

import pytest

from runner.env import ConfigError, env_bool, env_float, env_int, env_list, env_path, load_env_file


@pytest.mark.parametrize(
    ("raw", "expected"), [("true", True), ("TRUE", True), ("1", True), ("false", False), ("0", False)]
)
def test_booleans_accept_only_true_false_one_zero(raw: str, expected: bool) -> None:
    assert env_bool("X", not expected, environ={"X": raw}) is expected


@pytest.mark.parametrize("raw", ["yes", "no", "on", "2", "tru"])
def test_a_malformed_boolean_is_rejected_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"CORDON_DEBUG must be one of true, false, 1, 0; got '{raw}'"):
        env_bool("CORDON_DEBUG", False, environ={"CORDON_DEBUG": raw})


def test_unset_or_blank_falls_back_to_the_default() -> None:
    assert env_bool("X", True, environ={}) is True
    assert env_int("X", 7, environ={"X": "  "}) == 7


@pytest.mark.parametrize("raw", ["10k", "1.5", "0x10", "eight"])
def test_a_malformed_integer_is_rejected(raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"CORDON_HTTP_PORT must be a whole number; got '{raw}'"):
        env_int("CORDON_HTTP_PORT", 8000, environ={"CORDON_HTTP_PORT": raw})


def test_integer_bounds_are_enforced_with_the_bound_in_the_message() -> None:
    with pytest.raises(ConfigError, match="at most 65535; got 70000"):
        env_int("P", 1, maximum=65535, environ={"P": "70000"})
    with pytest.raises(ConfigError, match="at least 1; got 0"):
        env_int("P", 1, minimum=1, environ={"P": "0"})


def test_floats_reject_nan_and_words() -> None:
    assert env_float("F", 1.0, environ={"F": "2.5"}) == 2.5
    for raw in ("nan", "inf", "fast"):
        with pytest.raises(ConfigError, match="F must be a"):
            env_float("F", 1.0, environ={"F": raw})


def test_lists_split_on_commas_and_drop_blanks() -> None:
    assert env_list("L", [], environ={"L": "a, b,,c "}) == ["a", "b", "c"]


def test_relative_paths_are_taken_from_the_project_root_not_the_cwd(tmp_path: Path) -> None:
    assert env_path("D", Path("var"), base=tmp_path, environ={}) == tmp_path / "var"
    assert env_path("D", Path("var"), base=tmp_path, environ={"D": "/srv/x"}) == Path("/srv/x")


def test_env_file_fills_only_unset_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# comment\nCORDON_T_A=from-file\nexport CORDON_T_B='quoted value'\n\nCORDON_T_C=x\n")
    monkeypatch.delenv("CORDON_T_A", raising=False)
    monkeypatch.delenv("CORDON_T_B", raising=False)
    monkeypatch.setenv("CORDON_T_C", "from-env")
    load_env_file(env_file)
    import os

    assert os.environ["CORDON_T_A"] == "from-file"
    assert os.environ["CORDON_T_B"] == "quoted value"
    assert os.environ["CORDON_T_C"] == "from-env"
    for key in ("CORDON_T_A", "CORDON_T_B"):
        monkeypatch.delenv(key)


def test_a_malformed_env_file_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("GOOD=1\nthis is not an assignment\n")
    with pytest.raises(ConfigError, match=r"\.env:2: expected KEY=VALUE"):
        load_env_file(env_file)
