"""Staging refuses anything but plain files within caps; export never follows a link."""

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.files import OUTPUT_NAME_MAX, TOO_DEEP, export_outputs, stage_inputs
from runner.spec import OUTPUT_MAX_DEPTH, SAFE_NAME, Limits, Outcome, OutputFile, RunnerError


def _stage(tmp_path: Path, inputs: list[Path], **limits: int) -> list[OutputFile]:
    dest = tmp_path / "staged"
    dest.mkdir()
    return stage_inputs(tuple(inputs), dest, Limits(**limits))


def test_designated_files_are_copied_read_only_with_their_hashes(tmp_path: Path) -> None:
    source = tmp_path / "data.csv"
    source.write_bytes(b"a,b\n1,2\n")
    staged = _stage(tmp_path, [source])
    copy = tmp_path / "staged" / "data.csv"
    assert copy.read_bytes() == b"a,b\n1,2\n" and oct(copy.stat().st_mode & 0o777) == "0o444"
    assert staged[0].size == 8 and len(staged[0].sha256) == 64
    assert os.listdir(tmp_path / "staged") == ["data.csv"]


@pytest.mark.parametrize("name", ["..", ".hidden", "a b.csv", "x;rm.csv", "é.csv", "x.csv\n"])
def test_unsafe_names_are_refused(tmp_path: Path, name: str) -> None:
    source = tmp_path / "dir"
    source.mkdir()
    path = source / name if name != ".." else Path(str(source) + "/..")
    if name != "..":
        path.write_text("x")
    with pytest.raises(RunnerError) as caught:
        _stage(tmp_path, [path])
    assert caught.value.outcome is Outcome.REJECTED_INPUT


def test_a_hard_linked_input_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "a.csv"
    source.write_text("x")
    os.link(source, tmp_path / "b.csv")
    with pytest.raises(RunnerError, match="hard links"):
        _stage(tmp_path, [source])


def test_the_byte_cap_counts_every_input_together(tmp_path: Path) -> None:
    files = []
    for i in range(3):
        files.append(tmp_path / f"f{i}.bin")
        files[-1].write_bytes(b"x" * 400)
    with pytest.raises(RunnerError) as caught:
        _stage(tmp_path, files, input_max_bytes=1000)
    assert caught.value.code == "inputs_too_large" and "'f2.bin'" in caught.value.message


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "x.csv").write_text(d)
    with pytest.raises(RunnerError, match=r"two inputs are named 'x\.csv'"):
        _stage(tmp_path, [tmp_path / "a" / "x.csv", tmp_path / "b" / "x.csv"])


def test_export_copies_regular_files_in_subdirectories_and_refuses_the_rest(tmp_path: Path) -> None:
    area = tmp_path / "area"
    (area / "sub").mkdir(parents=True)
    (area / "sub" / "r.json").write_text("{}")
    (area / "link").symlink_to("/etc/passwd")
    (area / "bad name.txt").write_text("x")
    dest = tmp_path / "dest"
    report = export_outputs(area, dest, Limits())
    assert [o.name for o in report.outputs] == ["sub/r.json"]
    assert (dest / "sub" / "r.json").read_text() == "{}"
    reasons = {r.name: r.reason for r in report.rejected}
    assert reasons == {"link": "not a regular file (symbolic link)", "bad name.txt": "disallowed file name"}
    assert not report.over_cap


def test_export_keeps_the_first_files_up_to_the_count_and_byte_caps(tmp_path: Path) -> None:
    area = tmp_path / "area"
    area.mkdir()
    for i in range(5):
        (area / f"f{i}.txt").write_bytes(b"x" * 100)
    report = export_outputs(area, None, Limits(output_max_files=3, output_max_bytes=250))
    assert [o.name for o in report.outputs] == ["f0.txt", "f1.txt"]
    assert report.over_cap and len(report.rejected) == 3


def test_a_name_with_a_trailing_newline_is_not_safe_whichever_way_it_is_matched() -> None:
    for name in ("x.csv\n", "x\n", "x.csv\r", "x.csv\n\n"):
        assert SAFE_NAME.match(name) is None and SAFE_NAME.fullmatch(name) is None
    assert SAFE_NAME.match("x.csv") is not None


def test_export_refuses_outputs_and_directories_named_with_a_trailing_newline(tmp_path: Path) -> None:
    area = tmp_path / "area"
    (area / "sub\n").mkdir(parents=True)
    (area / "sub\n" / "y.csv").write_text("b")
    (area / "x.csv\n").write_text("a")
    (area / "ok.csv").write_text("c")
    report = export_outputs(area, tmp_path / "dest", Limits())
    assert [o.name for o in report.outputs] == ["ok.csv"]
    reasons = {r.name: r.reason for r in report.rejected}
    assert reasons == {"x.csv\n": "disallowed file name", "sub\n": "directory with a disallowed name"}


def test_export_names_the_first_file_over_the_byte_cap_at_its_apparent_size(tmp_path: Path) -> None:
    area = tmp_path / "area"
    area.mkdir()
    (area / "a.txt").write_bytes(b"x" * 100)
    with open(area / "big", "wb") as handle:
        handle.truncate(2 << 30)  # sparse: nothing on disk, 2 GiB by size
    (area / "c.txt").write_bytes(b"x" * 100)
    (area / "d.txt").write_bytes(b"x" * 900)
    report = export_outputs(area, tmp_path / "dest", Limits(output_max_bytes=1000))
    assert [o.name for o in report.outputs] == ["a.txt", "c.txt"]
    assert report.oversize == ("big", 2 << 30) and report.over_cap and not report.too_many
    assert {r.name for r in report.rejected} == {"big", "d.txt"}
    assert not (tmp_path / "dest" / "big").exists()


def test_export_enters_folders_down_to_the_depth_cap_and_refuses_deeper_ones_unread(tmp_path: Path) -> None:
    area = tmp_path / "area"
    floor = area.joinpath(*[f"f{n}" for n in range(1, OUTPUT_MAX_DEPTH + 1)])  # 16 folders down
    (floor / "past").mkdir(parents=True)
    (floor / "deepest.csv").write_text("kept")
    (floor / "past" / "hidden.csv").write_text("never read")
    (area / "top.csv").write_text("kept")
    dest = tmp_path / "dest"
    report = export_outputs(area, dest, Limits())
    bottom = floor.relative_to(area).as_posix()
    assert [o.name for o in report.outputs] == [f"{bottom}/deepest.csv", "top.csv"]
    assert (dest / bottom / "deepest.csv").read_text() == "kept"
    assert [(r.name, r.reason) for r in report.rejected] == [(f"{bottom}/past", TOO_DEEP)]
    assert report.too_deep == f"{bottom}/past" and report.over_cap and not report.too_many


def test_a_path_longer_than_the_record_keeps_is_refused_and_its_neighbours_kept(tmp_path: Path) -> None:
    area = tmp_path / "area"
    long_dir = area.joinpath(*["x" * 100] * 2)  # 16 folders of 128 characters would be 2 KiB
    long_dir.mkdir(parents=True)
    (long_dir / ("y" * 60)).write_text("too long a path")
    (long_dir / "ok.csv").write_text("kept")
    report = export_outputs(area, None, Limits())
    assert [o.name for o in report.outputs] == [f"{'x' * 100}/{'x' * 100}/ok.csv"]
    assert [r.reason for r in report.rejected] == [f"path longer than {OUTPUT_NAME_MAX} bytes"]
    assert not report.over_cap


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Path]:
    """An output area holding one file and a chain of 5,000 nested folders (made and removed with
    tools that do not recurse: Python's own rmtree would hit its recursion limit)."""
    area = tmp_path / "area"
    area.mkdir()
    (area / "a.csv").write_text("x")
    fd = os.open(area, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(5000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    yield area
    subprocess.run(["rm", "-rf", str(area)], check=True)


def test_a_chain_of_thousands_of_folders_is_refused_at_the_cap_without_recursion(chain: Path) -> None:
    fds = len(os.listdir("/proc/self/fd"))
    started = time.monotonic()
    report = export_outputs(chain, None, Limits())
    assert time.monotonic() - started < 1.0
    assert [o.name for o in report.outputs] == ["a.csv"]
    deepest = "/".join(["d"] * (OUTPUT_MAX_DEPTH + 1))
    assert [(r.name, r.reason) for r in report.rejected] == [(deepest, TOO_DEEP)]
    assert report.too_deep == deepest and report.over_cap
    assert len(os.listdir("/proc/self/fd")) == fds  # every folder the walk opened is closed


def test_a_name_with_folders_stages_the_file_in_read_only_folders(tmp_path: Path) -> None:
    """A check program's view of a student's outputs: /input/outputs/<name>, nothing writable."""
    sources = []
    for name in ("stdout", "a.csv", "b.png"):
        sources.append(tmp_path / name)
        sources[-1].write_text(name)
    dest = tmp_path / "staged"
    dest.mkdir()
    names = ("stdout", "outputs/a.csv", "outputs/plots/b.png")
    staged = stage_inputs(tuple(sources), dest, Limits(), names)
    assert [s.name for s in staged] == list(names)
    assert (dest / "outputs" / "plots" / "b.png").read_text() == "b.png"
    for folder in (dest / "outputs", dest / "outputs" / "plots"):
        assert oct(folder.stat().st_mode & 0o777) == "0o555"


@pytest.mark.parametrize(
    ("names", "code"),
    [
        (("outputs/../x",), "unsafe_input_name"),
        (("/abs",), "unsafe_input_name"),
        (("a//b",), "unsafe_input_name"),
        (("a/b/c/d/e",), "unsafe_input_name"),  # deeper than INPUT_MAX_DEPTH
        (("outputs", "outputs/x"), "duplicate_input_name"),  # a file and a folder of one name
        (("outputs/x", "outputs"), "duplicate_input_name"),
    ],
)
def test_names_with_folders_are_refused_when_unsafe_or_clashing(tmp_path: Path, names: tuple[str, ...],
                                                                 code: str) -> None:  # fmt: skip
    sources = []
    for index in range(len(names)):
        sources.append(tmp_path / f"f{index}")
        sources[-1].write_text("x")
    dest = tmp_path / "staged"
    dest.mkdir()
    with pytest.raises(RunnerError) as caught:
        stage_inputs(tuple(sources), dest, Limits(), names)
    assert caught.value.code == code and caught.value.outcome is Outcome.REJECTED_INPUT
