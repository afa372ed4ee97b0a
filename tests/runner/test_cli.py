import subprocess

from tests.conftest import PYTHON, child_env


def _runner(project_root, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "runner", *args], cwd=project_root, env=child_env(), capture_output=True, text=True, timeout=60
    )


def test_help_lists_the_commands(project_root) -> None:
    result = _runner(project_root, "--help")
    assert result.returncode == 0
    assert "images" in result.stdout


def test_a_usage_error_exits_64(project_root) -> None:
    result = _runner(project_root, "images", "frobnicate")
    assert result.returncode == 64
    assert "invalid choice" in result.stderr


def test_images_list_shows_each_built_image_whether_it_is_here_and_whether_it_is_pinned(project_root) -> None:
    result = _runner(project_root, "images", "list")
    assert result.returncode == 0
    rows = {line.split("\t")[0]: line.split("\t") for line in result.stdout.splitlines()[1:]}
    assert rows["python"][1].startswith("sha256:")
    for name in ("python", "node", "python-data"):
        assert rows[name][4] == "present"
        assert rows[name][5] == "pinned" or rows[name][5].startswith("pin is sha256:")
