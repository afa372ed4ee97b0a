"""Test results graded before this read "failed: the program exited with an error" for a wrong
output too (one table held the test status "failed" and the run outcome "failed", the later won).
Their stored detail is rewritten with the words grading writes now; nothing else changes."""

from typing import Any

from django.db import migrations

CRASH = "failed: the program exited with an error"


def words(outcome: str | None, exit_code: int | None, checked: bool) -> str:
    """grading.result_words of its day for a result "failed", kept here as it was."""
    if outcome in (None, "", "succeeded"):
        return (
            "failed: the check program did not accept the output"
            if checked
            else "failed: the output was not what was expected"
        )
    return f"{CRASH} (exit status {exit_code})" if outcome == "failed" and exit_code is not None else CRASH


def reword(apps: Any, schema_editor: Any) -> None:
    TestResult = apps.get_model("playground", "TestResult")
    for result in TestResult.objects.filter(status="failed", detail=CRASH).only(
        "id", "status", "outcome", "exit_code", "spec"
    ).iterator(chunk_size=500):  # fmt: skip
        said = words(result.outcome, result.exit_code, bool((result.spec or {}).get("check_code")))
        if said != CRASH:
            TestResult.objects.filter(id=result.id).update(detail=said)


class Migration(migrations.Migration):
    dependencies = [("playground", "0014_notebook_runs_version")]

    operations = [migrations.RunPython(reword, migrations.RunPython.noop)]
