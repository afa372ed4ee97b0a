"""Environments: a recipe that extends another with Debian packages and wheels pinned by hash.
What a requirements file may say (and the line a refusal names), how an environment folds in its
base, which wheels fit the image's python, that a wheel is unpacked and never run, and the shipped
`python-data` built and working in a sandbox."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from runner.config import Paths, paths_from_env
from runner.images import ImageError, ImageStore, load_recipe, read_lock
from runner.images.recipes import parse_requirements, recipe_names
from runner.images.wheels import Interpreter, fetch, install
from tests.conftest import PYTHON, child_env

HASH = "a" * 64
BOOKWORM = Interpreter(3, 11, (2, 36), "x86_64")


# --- what a requirements file may say ------------------------------------------------------


def test_a_requirements_file_of_pinned_hashed_lines_is_read_with_continuations_and_comments() -> None:
    text = (
        f"# wheels\nPolars_Runtime==2.1.0 \\\n    --hash=sha256:{HASH} \\\n    --hash=sha256:{'b' * 64}  # two\n"
        f"\nduckdb==2.0.1 --hash=sha256:{HASH}\n"
    )
    first, second = parse_requirements(text, "req.txt")
    assert (first.name, first.version, first.hashes, first.line) == ("polars-runtime", "2.1.0", (HASH, "b" * 64), 2)
    assert (second.pin, second.line) == ("duckdb==2.0.1", 6)


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        ("polars==2.1.0", r"req.txt, line 2: polars==2.1.0 has no --hash=sha256"),
        ("polars>=2 --hash=sha256:" + HASH, r"line 2: 'polars>=2' is not pinned to one version"),
        ("polars --hash=sha256:" + HASH, r"line 2: 'polars' is not pinned"),
        ("polars[pandas]==2.1.0 --hash=sha256:" + HASH, r"line 2: 'polars\[pandas\]==2.1.0' is not pinned"),
        ("https://example.com/x.whl", r"line 2: 'https://example.com/x.whl' is not pinned"),
        ("./local.whl", r"line 2: './local.whl' is not pinned"),
        ("-r other.txt", r"line 2: options are not accepted \(-r\)"),
        ("--index-url https://evil.example/simple", r"line 2: options are not accepted \(--index-url\)"),
        ("-e git+https://example.com/x#egg=x", r"line 2: options are not accepted \(-e\)"),
        ("polars==2.1.0 --hash=md5:" + "a" * 32, r"line 2: '--hash=md5:a+' is not a `--hash=sha256"),
        ('polars==2.1.0 ; python_version < "3.12" --hash=sha256:' + HASH, r"line 2: environment markers"),
        ("duckdb==2.0.1 --hash=sha256:" + HASH, r"line 2: duckdb is already required on line 1"),
    ],
)
def test_a_requirement_that_is_not_one_hashed_version_is_refused_naming_its_line(line: str, refusal: str) -> None:
    with pytest.raises(ImageError, match=refusal):
        parse_requirements(f"duckdb==2.0.1 --hash=sha256:{HASH}\n{line}\n", "req.txt")


# --- an environment folds in its base ------------------------------------------------------


def _recipes(tmp_path: Path, env: str, requirements: str = "", overlay: dict[str, bytes] | None = None) -> Path:
    (tmp_path / "base" / "rootfs" / "etc").mkdir(parents=True)
    (tmp_path / "base" / "recipe.toml").write_text(
        'suite = "bookworm"\npackages = ["python3", "python3-numpy"]\nprune = ["python3-pythran"]\n'
        'source_date_epoch = 5\ncommand = ["/usr/bin/python3"]\nruntime = "python"\n'
    )
    (tmp_path / "base" / "rootfs" / "etc" / "hook.py").write_bytes(b"base\n")
    (tmp_path / "base" / "rootfs" / "etc" / "kept.py").write_bytes(b"kept\n")
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "recipe.toml").write_text(env)
    if requirements:
        (tmp_path / "env" / "requirements.txt").write_text(requirements)
    for name, data in (overlay or {}).items():
        (tmp_path / "env" / "rootfs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "env" / "rootfs" / name).write_bytes(data)
    return tmp_path


def test_an_environment_has_its_bases_packages_prune_overlay_and_command_and_adds_its_own(tmp_path: Path) -> None:
    recipes = _recipes(tmp_path, 'base = "base"\npackages = ["python3-seaborn", "python3-numpy"]\n'
                       'description = "with seaborn"\n', f"polars==2.1.0 --hash=sha256:{HASH}\n",
                       {"etc/hook.py": b"mine\n"})  # fmt: skip
    env, base = load_recipe("env", recipes), load_recipe("base", recipes)
    assert env.packages == ("python3", "python3-numpy", "python3-seaborn")
    assert (env.prune, env.command, env.suite, env.source_date_epoch) == (
        base.prune, base.command, base.suite, base.source_date_epoch
    )  # fmt: skip
    assert {f.path: f.data for f in env.overlay} == {"etc/hook.py": b"mine\n", "etc/kept.py": b"kept\n"}
    assert (env.runtime, env.base, env.description) == ("python", "base", "with seaborn")
    assert [r.pin for r in env.requirements] == ["polars==2.1.0"] and base.requirements == ()
    before = env.sha256
    (recipes / "base" / "rootfs" / "etc" / "kept.py").write_bytes(b"changed\n")
    assert load_recipe("env", recipes).sha256 != before  # a change of its base rebuilds it


def test_a_change_of_an_environments_requirements_changes_its_hash(tmp_path: Path) -> None:
    recipes = _recipes(tmp_path, 'base = "base"\n', f"polars==2.1.0 --hash=sha256:{HASH}\n")
    before = load_recipe("env", recipes).sha256
    (recipes / "env" / "requirements.txt").write_text(f"polars==2.1.0 --hash=sha256:{'c' * 64}\n")
    assert load_recipe("env", recipes).sha256 != before


@pytest.mark.parametrize(
    ("env", "requirements", "refusal"),
    [
        ('base = "env"\n', "", "would make the recipe extend itself"),
        ('base = "missing"\n', "", "no image recipe named 'missing'"),
        ('base = "base"\nruntime = "ruby"\n', "", "runtime must be one of python, node"),
        ('base = "base"\nruntime = "node"\n', f"left-pad==1.0 --hash=sha256:{HASH}\n", "only a python environment"),
        ('base = "base"\n', "polars==2.1.0\n", r"env/requirements.txt, line 1: polars==2.1.0 has no --hash"),
    ],
)
def test_an_environment_that_cannot_be_built_as_said_is_refused(
    tmp_path: Path, env: str, requirements: str, refusal: str
) -> None:
    with pytest.raises(ImageError, match=refusal):
        load_recipe("env", _recipes(tmp_path, env, requirements))


# --- which wheels fit, and how one is unpacked ---------------------------------------------


@pytest.mark.parametrize(
    ("filename", "fits"),
    [
        ("duckdb-2.0.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", True),
        ("polars_runtime_32-2.1.0-cp311-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("polars-2.1.0-py3-none-any.whl", True),
        ("duckdb-2.0.1-cp312-cp312-manylinux_2_27_x86_64.whl", False),  # another python
        ("duckdb-2.0.1-cp311-cp311-macosx_11_0_arm64.whl", False),  # another platform
        ("duckdb-2.0.1-cp311-cp311-manylinux_2_39_x86_64.whl", False),  # a newer C library than Debian 12's
        ("duckdb-2.0.1-cp311-cp311-manylinux_2_28_aarch64.whl", False),  # another machine
        ("duckdb-2.0.1-cp311-cp311-linux_x86_64.whl", False),  # built for one host only
    ],
)
def test_a_wheel_fits_the_images_python_by_its_tags(filename: str, fits: bool) -> None:
    assert BOOKWORM.accepts(filename) is fits


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    """A wheel as a build tool writes one: its files, WHEEL, METADATA and a RECORD of their hashes."""
    name, version = path.name.split("-")[:2]
    info = f"{name}-{version}.dist-info"
    files = {**members, f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()}  # fmt: skip
    rows = [
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
        for p, d in files.items()
    ]
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{info}/RECORD", "\n".join([*rows, f"{info}/RECORD,,"]) + "\n")
    return path


def test_a_wheel_is_unpacked_into_the_images_site_directory_and_nothing_of_it_runs(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    code = f"open({str(canary)!r}, 'w').write('ran')\n".encode()
    wheel = _wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny/__init__.py": code, "tiny-setup.pth": code})
    tree = tmp_path / "tree"
    assert install([wheel], tree, BOOKWORM) == ("pip:tiny=1.0",)
    site = tree / "usr/local/lib/python3.11/dist-packages"
    assert (site / "tiny" / "__init__.py").read_bytes() == code
    assert (site / "tiny-1.0.dist-info" / "INSTALLER").read_bytes() == b"cordon\n"
    assert not canary.exists()  # unpacked, not imported; and no .pyc written by the host's python
    assert not list(tree.rglob("*.pyc"))


def test_a_wheel_with_a_path_outside_the_site_directory_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "evil-1.0-py3-none-any.whl", {"../../../etc/cron.d/evil": b"* * * * * root x\n"})
    with pytest.raises(ImageError, match="would land outside the image's site directory"):
        install([wheel], tmp_path / "tree", BOOKWORM)
    assert not (tmp_path / "etc").exists()


def test_a_cached_wheel_that_no_longer_hashes_to_its_line_is_refused_and_dropped(tmp_path: Path) -> None:
    cache = tmp_path / "wheels"
    wheel = _wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny/__init__.py": b""})
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (cache / digest).mkdir(parents=True)
    cached = cache / digest / wheel.name
    cached.write_bytes(wheel.read_bytes() + b"tampered")
    (requirement,) = parse_requirements(f"tiny==1.0 --hash=sha256:{digest}\n", "req.txt")
    with pytest.raises(ImageError, match=r"req\.txt, line 1: tiny-1\.0-py3-none-any\.whl hashes to none"):
        fetch((requirement,), BOOKWORM, cache, tmp_path / "log")
    assert not cached.exists()
    cached.write_bytes(wheel.read_bytes())
    assert fetch((requirement,), BOOKWORM, cache, tmp_path / "log") == [cached]


# A wheel for another platform (MarkupSafe's for macOS arm64), and an sdist: each the only file a
# line's hash names. Small packages: pip fetches the manylinux wheel (23 KB) to compare its hash.
OTHER_PLATFORM = ("markupsafe==3.0.2", "93335ca3812df2f366e80509ae119189886b0f3c2b81325d39efdb84a1e2ae93")
SDIST = ("six==1.16.0", "1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926")  # six-1.16.0.tar.gz


@pytest.mark.parametrize(("pin", "digest"), [OTHER_PLATFORM, SDIST], ids=["a wheel for macOS", "an sdist"])
def test_a_line_whose_hash_is_no_wheel_for_this_image_is_refused_at_build_naming_it(
    tmp_path: Path, pin: str, digest: str
) -> None:
    """pip (from PyPI, as a build does) fetches only a wheel for the image's python, whose hash is not
    the line's: the build stops naming the line, with pip's own word that the hashes differ."""
    (requirement,) = parse_requirements(f"\n{pin} --hash=sha256:{digest}\n", "images/x/requirements.txt")
    with pytest.raises(ImageError) as refused:
        fetch((requirement,), BOOKWORM, tmp_path / "wheels", tmp_path / "log")
    message = str(refused.value)
    assert message.startswith(f"images/x/requirements.txt, line 2: {pin}: no wheel for this image "
                              "(cp311, manylinux_2_36_x86_64) with a hash the line gives")  # fmt: skip
    assert "Expected sha256 " + digest in message, message  # fetched and compared, not a network failure
    assert not list((tmp_path / "wheels").rglob("*.whl"))


# --- the shipped environments --------------------------------------------------------------


def test_python_data_extends_python_with_hashed_wheels_of_polars_duckdb_and_pyarrow() -> None:
    env, python = load_recipe("python-data"), load_recipe("python")
    assert env.base == "python" and env.runtime == "python" and env.packages == python.packages
    assert {r.name for r in env.requirements} == {"polars", "polars-runtime-compat", "duckdb", "pyarrow"}
    assert all(r.hashes for r in env.requirements)
    assert {"python3-seaborn", "python3-statsmodels", "python3-ipython"} <= set(python.packages)


@pytest.mark.images
def test_the_built_python_data_records_its_wheels_and_runs_a_polars_and_duckdb_query() -> None:
    entry = read_lock()["python-data"]
    assert {"pip:polars=2.1.0", "pip:duckdb=1.5.6", "pip:pyarrow=25.0.1"} <= set(entry.packages)
    assert ImageStore(paths_from_env()).verify("python-data").ok
    script = (
        "import polars as pl, duckdb, pyarrow as pa, seaborn, statsmodels.api\n"
        "df = pl.DataFrame({'k': ['a', 'b', 'a'], 'n': [1, 2, 3]})\n"
        "print(df.group_by('k').agg(pl.col('n').sum()).sort('k').rows())\n"
        "print(duckdb.sql('select k, sum(n) from df group by k order by k').fetchall())\n"
        "print(pa.table({'x': [1, 2]}).to_pandas().x.sum())\n"
    )
    out = subprocess.run(
        [PYTHON, "-m", "runner", "run", "--runtime", "python", "--environment", "python-data", "--engine",
         "namespace", "--memory-mib", "512", "--json", "-"],
        input=script.encode(), capture_output=True, env=child_env(), timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    result = json.loads(out.stdout)
    assert result["image"] == {"name": "python-data", "digest": entry.digest}
    assert result["stdout"] == "[('a', 4), ('b', 2)]\n[('a', 4), ('b', 2)]\n3\n", result["stderr"]


# What each environment with wheels must do on a baseline CPU, the image's own python3 and wheels run
# by QEMU's user-mode emulator as a Nehalem (x86-64-v2: SSE4.2, no AVX), the CPU a microVM on make
# test-vm's emulated EPYC has (measured there: no avx, no xsave). A wheel built for AVX (DuckDB 2.0's,
# polars's default runtime) dies of SIGILL on its import.
BASELINE_CPU = "Nehalem"
BASELINE_CHECKS = {
    "python-data": (
        "import polars as pl, duckdb, pyarrow as pa, pyarrow.parquet as pq, io\n"
        "df = pl.DataFrame({'k': ['a', 'b', 'a'], 'n': [1, 2, 3]})\n"
        "print(df.group_by('k').agg(pl.col('n').sum()).sort('k').rows())\n"
        "print(duckdb.sql('select k, sum(n) from df group by k order by k').fetchall())\n"
        "sink = io.BytesIO(); pq.write_table(df.to_arrow(), sink)\n"
        "print(pq.read_table(pa.BufferReader(sink.getvalue())).num_rows)\n"
        # Under QEMU's user-mode emulator (with its AVX EPYC too) these three libraries' threads
        # abort the interpreter's teardown ("terminate called without an active exception");
        # natively the same program exits 0 (the test above, transform_polars.py). Not what this
        # test is about, so the program leaves without a teardown once its answer is out.
        "import os, sys; sys.stdout.flush(); os._exit(0)\n",
        "[('a', 4), ('b', 2)]\n[('a', 4), ('b', 2)]\n3\n",
    ),
}


def test_every_environment_with_wheels_has_its_baseline_cpu_check() -> None:
    with_wheels = {name for name in recipe_names() if load_recipe(name).requirements}
    assert with_wheels == set(BASELINE_CHECKS), "add the environment's program to BASELINE_CHECKS"


@pytest.mark.images
@pytest.mark.parametrize("name", sorted(BASELINE_CHECKS))
def test_an_environments_wheels_run_on_a_baseline_x86_64_cpu(name: str) -> None:
    emulator = shutil.which("qemu-x86_64")
    assert emulator, "qemu-x86_64 is missing: `make test-system` installs qemu-user"
    root = ImageStore(paths_from_env()).resolve(name).rootfs
    program, expected = BASELINE_CHECKS[name]
    out = subprocess.run(
        [emulator, "-cpu", BASELINE_CPU, "-L", str(root), "-0", "/usr/bin/python3", str(root / "usr/bin/python3.11"),
         "-c", program],
        capture_output=True, timeout=240, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, cwd=root,
    )  # fmt: skip
    stderr = out.stderr.decode(errors="replace")[-2000:]
    assert out.returncode == 0, f"{name} on a {BASELINE_CPU} CPU: exit {out.returncode}\n{stderr}"
    assert out.stdout.decode() == expected, stderr


@pytest.mark.images
def test_a_build_whose_wheel_cannot_be_had_fails_naming_its_line_and_leaves_the_previous_build_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's own steps (the tree's python asked, pip's fetch) on a copy of the built python
    tree (hard links: mmdebstrap's part is not what this is about); the record keeps the last good build."""
    recipes = tmp_path / "recipes"
    (recipes / "env").mkdir(parents=True)
    (recipes / "env" / "recipe.toml").write_text(
        'suite = "bookworm"\npackages = ["python3"]\nsource_date_epoch = 1\ncommand = ["/usr/bin/python3"]\n'
    )
    store = ImageStore(Paths(data_dir=tmp_path / "data", images_dir=tmp_path / "images"), recipes_dir=recipes,
                       pin_path=tmp_path / "lock.json")  # fmt: skip
    python = ImageStore(paths_from_env()).resolve("python").rootfs

    def copy_of_python(recipe: object, target: Path, log_path: Path) -> None:
        subprocess.run(["cp", "-al", str(python), str(target)], check=True)

    monkeypatch.setattr("runner.images.store.mmdebstrap", copy_of_python)
    (first,) = store.build(["env"], log=lambda _: None)  # no wheels yet: built
    assert store.built()["env"].digest == first.digest
    (recipes / "env" / "requirements.txt").write_text(f"# wheels\n{SDIST[0]} --hash=sha256:{SDIST[1]}\n")
    with pytest.raises(ImageError, match=r"recipes/env/requirements.txt, line 2: six==1\.16\.0: no "
                       r"wheel for this image \(cp311, manylinux_2_36_x86_64\)"):  # fmt: skip
        store.build(["env"], log=lambda _: None)
    assert store.built()["env"].digest == first.digest and store.resolve("env").digest == first.digest
    assert not list((tmp_path / "images" / "build").iterdir())  # the failed build's tree is gone
    assert ImageStore(paths_from_env()).verify("python").ok  # the tree it linked to is untouched
