"""Run receipts without Django: the canonical form, signing and checking, keys in their written
forms, the site key made once, and `python -m runner receipt verify` as a person runs it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runner import receipt
from tests.conftest import PYTHON, child_env


def _body(sequence: int = 1, prev: str | None = None, **run: Any) -> dict[str, Any]:
    facts = {"id": "7d9f0c1e-0000-4000-8000-000000000001", "outcome": "succeeded", "reason": "exit 0",
             "wall_s": "0.25", "code_sha256": "ab" * 32, "image": {"name": "python", "digest": "sha256:" + "cd" * 32},
             "engine": {"name": "namespace", "version": "1", "isolation": "namespace"}, "inputs": [], "outputs": [],
             "cleanup": {"ok": True, "checks": [{"name": "processes", "ok": True}]}, "egress": None,
             "times": {"created_at": "2026-12-01T10:00:00.000000+00:00"}, "note": "ünïcode ✓", **run}  # fmt: skip
    return {"version": receipt.VERSION, "key_id": "k", "chain": {"host": "w1", "sequence": sequence, "prev": prev},
            "run": facts}  # fmt: skip


def _verify_cli(*files: Path | str, key: str, stdin: str | None = None, cwd: Path | None = None) -> Any:
    """`python -m runner receipt verify` in a child process that fails if Django was imported."""
    program = (
        "import sys; from runner.cli import main; rc = main(sys.argv[1:]); "
        "assert 'django' not in sys.modules, 'the verifier imported Django'; sys.exit(rc)"
    )
    env = child_env(PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    argv = [PYTHON, "-c", program, "receipt", "verify", *map(str, files), "--key", key]
    return subprocess.run(argv, env=env, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60)


def test_the_canonical_form_is_sorted_compact_utf8_and_refuses_floats() -> None:
    assert receipt.canonical({"b": 1, "a": {"z": None, "y": "é\n"}}) == '{"a":{"y":"é\\n","z":null},"b":1}'.encode()
    with pytest.raises(receipt.ReceiptError, match=r"receipt\.run\.wall_s is a floating-point number"):
        receipt.canonical({"run": {"wall_s": 0.1}})
    assert receipt.plain({"cpus": 0.5, "memory_mib": 256, "on": True, "l": [1.0, None]}) == {
        "cpus": "0.5", "memory_mib": 256, "on": True, "l": ["1.0", None]}  # fmt: skip
    assert receipt.decimal(None) is None  # unknown stays unknown, never 0


def test_a_signed_receipt_verifies_and_any_change_to_it_does_not() -> None:
    key = Ed25519PrivateKey.generate()
    document = receipt.sign(_body(), key)
    assert receipt.verify(json.loads(json.dumps(document)), key.public_key()) == _body()
    changed = json.loads(json.dumps(document))
    changed["receipt"]["run"]["outcome"] = "failed"
    with pytest.raises(receipt.ReceiptError) as caught:
        receipt.verify(changed, key.public_key())
    assert caught.value.code == "hash_mismatch" and caught.value.is_forgery
    changed["sha256"] = receipt.digest(changed["receipt"])  # the hash made to match: the signature still fails
    with pytest.raises(receipt.ReceiptError) as caught:
        receipt.verify(changed, key.public_key())
    assert caught.value.code == "bad_signature"
    with pytest.raises(receipt.ReceiptError, match="signed with another key"):
        receipt.verify(document, Ed25519PrivateKey.generate().public_key())


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ([], "not a receipt"),
        ({"format": "something-else"}, "not a receipt"),
        ({"format": "cordon-receipt", "receipt": "x"}, 'no "receipt" object'),
        ({"format": "cordon-receipt", "receipt": {"version": 99}}, "receipt version 99"),
        ({"format": "cordon-receipt", "receipt": {"version": 1}, "sha256": "00"}, '"sha256" of 64'),
        ({"format": "cordon-receipt", "receipt": {"version": 1}, "sha256": "0" * 64, "signature": "!!"}, "signature"),
    ],
)
def test_a_document_that_is_not_a_receipt_is_malformed_not_forged(document: Any, words: str) -> None:
    with pytest.raises(receipt.ReceiptError, match=words) as caught:
        receipt.verify(document, Ed25519PrivateKey.generate().public_key())
    assert caught.value.code == "malformed" and not caught.value.is_forgery


def test_a_public_key_is_read_as_text_as_a_file_or_as_pem_and_a_private_key_is_refused(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    text = receipt.public_key_text(key)
    assert text.startswith("ed25519:") and len(text) == len("ed25519:") + 44
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "key.txt").write_text(text + "\n")
    (tmp_path / "key.pem").write_bytes(pem)
    for given in (text, str(tmp_path / "key.txt"), str(tmp_path / "key.pem")):
        assert receipt.parse_public_key(given).public_bytes(*raw) == key.public_key().public_bytes(*raw)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "private.pem").write_bytes(private)
    for given, words in [
        (str(tmp_path / "private.pem"), "that is a private key"),
        ("ed25519:AAAA", "32 bytes, not 3"),
        ("ed25519:not base64!", "not base64"),
        (str(tmp_path / "absent"), "neither a key"),
    ]:
        with pytest.raises(receipt.ReceiptError, match=words):
            receipt.parse_public_key(given)


def test_the_site_key_is_made_once_mode_0600_and_every_process_asking_at_once_gets_the_same(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "receipt_key.pem"
    start = threading.Barrier(8)

    def ask(_: int) -> str:
        start.wait()  # all at once, before any key exists
        return receipt.public_key_text(receipt.site_key(path))

    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(ask, range(8)))
    assert len(set(texts)) == 1 and texts[0] is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == ["receipt_key.pem"]  # no key written aside is left
    assert receipt.public_key_text(receipt.site_key(path)) == texts[0]  # read again, never replaced
    path.write_text("not a key")
    with pytest.raises(receipt.ReceiptError, match="not an unencrypted PEM private key"):
        receipt.site_key(path)


def test_the_site_key_is_read_once_per_process_and_again_when_its_file_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "receipt_key.pem"
    loads: list[bytes] = []
    load = serialization.load_pem_private_key

    def counted(data: bytes, **kwargs: Any) -> Any:
        loads.append(data)
        return load(data, **kwargs)

    monkeypatch.setattr(serialization, "load_pem_private_key", counted)
    first = receipt.site_key(path)
    assert receipt.site_key(path) is first and len(loads) == 1  # every finish asks; the file is read once
    rotated = tmp_path / "rotated.pem"
    rotated.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    os.replace(rotated, path)  # an operator's rotation: same size, another file
    second = receipt.site_key(path)
    assert len(loads) == 2 and receipt.key_id(second) != receipt.key_id(first)


def test_receipts_of_one_host_given_together_must_follow_each_other() -> None:
    key = Ed25519PrivateKey.generate()
    first = _body(1)
    second = _body(2, prev=receipt.digest(first))
    stray = _body(3, prev="0" * 64)
    bodies = [second, first, stray]
    problems = receipt.chain_problems(bodies, [receipt.digest(b) for b in bodies])
    assert problems == ["w1 #3 does not follow #2"]
    assert receipt.verify(receipt.sign(stray, key), key.public_key()) == stray  # each alone still holds


def test_the_cli_prints_a_valid_receipts_facts_without_django(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "run.receipt.json"
    path.write_text(json.dumps(receipt.sign(_body(prev="ef" * 32), key), indent=2))
    done = _verify_cli(path, key=receipt.public_key_text(key), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"valid, signed by key {receipt.key_id(key)}" in done.stdout
    for fact in ("7d9f0c1e-0000-4000-8000-000000000001", "succeeded (exit 0)", "sha256:" + "cd" * 32,
                 "namespace", "ab" * 32, "w1 #1", "ef" * 32, "0.25 s"):  # fmt: skip
        assert fact in done.stdout, fact
    from_stdin = _verify_cli("-", key=receipt.public_key_text(key), stdin=path.read_text())
    assert from_stdin.returncode == 0 and "succeeded (exit 0)" in from_stdin.stdout


def test_the_cli_fails_a_changed_receipt_with_1_and_an_unreadable_one_or_key_with_2(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    public = receipt.public_key_text(key)
    document = receipt.sign(_body(), key)
    document["receipt"]["run"]["outcome"] = "failed"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(document))
    done = _verify_cli(changed, key=public)
    assert done.returncode == 1 and "NOT VALID" in done.stderr and "it was changed" in done.stderr
    assert "failed" not in done.stdout  # the facts of a receipt that does not hold are never printed

    other = _verify_cli(tmp_path / "ok.json", key=receipt.public_key_text(Ed25519PrivateKey.generate()))
    assert other.returncode == 2 and "cannot read it" in other.stderr
    (tmp_path / "ok.json").write_text(json.dumps(receipt.sign(_body(), key)))
    wrong_key = _verify_cli(tmp_path / "ok.json", key=receipt.public_key_text(Ed25519PrivateKey.generate()))
    assert wrong_key.returncode == 1 and "signed with another key" in wrong_key.stderr
    (tmp_path / "junk.json").write_text("{not json")
    junk = _verify_cli(tmp_path / "junk.json", key=public)
    assert junk.returncode == 2 and "not JSON" in junk.stderr
    bad_key = _verify_cli(tmp_path / "ok.json", key="ed25519:AAAA")
    assert bad_key.returncode == 2 and "32 bytes" in bad_key.stderr


def test_the_cli_fails_two_receipts_of_one_host_that_do_not_link(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    first, second = _body(1), _body(2, prev="12" * 32)
    for name, body in (("1.json", first), ("2.json", second)):
        (tmp_path / name).write_text(json.dumps(receipt.sign(body, key)))
    done = _verify_cli(tmp_path / "1.json", tmp_path / "2.json", key=receipt.public_key_text(key))
    assert done.returncode == 1 and "the chain is broken: w1 #2 does not follow #1" in done.stderr
    linked = _body(2, prev=receipt.digest(first))
    (tmp_path / "2.json").write_text(json.dumps(receipt.sign(linked, key)))
    assert _verify_cli(tmp_path / "1.json", tmp_path / "2.json", key=receipt.public_key_text(key)).returncode == 0
