"""Run receipts: a finished run's facts as canonical JSON, signed with the site's Ed25519 key and
chained per host by hash. The web writes them (playground/services/receipts.py); anyone holding the
public key checks one here (`python -m runner receipt verify`), with no Django and no network.

A receipt file is a JSON object:

    {"format": "cordon-receipt", "receipt": BODY, "sha256": HEX, "signature": BASE64}

BODY's canonical bytes are what is hashed (sha256, hex) and signed (Ed25519, base64). Canonical:
keys sorted, no whitespace, UTF-8 without escaping beyond JSON's own, and no floating-point
numbers at all (a fractional figure is a decimal string, "1.25"): that subset of JSON has one
serialisation in every language, and is RFC 8785 (JCS) for it. A public key is written
"ed25519:" followed by the base64 of its 32 raw bytes; a PEM public key is accepted too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

FORMAT = "cordon-receipt"
VERSION = 1
KEY_PREFIX = "ed25519:"
HASH_HEX_CHARS = 64


class ReceiptError(Exception):
    """A receipt or key that cannot be checked, with a stable code: `malformed` (not a receipt),
    `bad_key` (not a usable public key), `hash_mismatch` or `bad_signature` (a changed receipt, or
    one signed with another key)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def is_forgery(self) -> bool:
        """A receipt that was read but does not hold: not a problem of the file's form."""
        return self.code in ("hash_mismatch", "bad_signature")


# --- canonical form ------------------------------------------------------------------------


def canonical(value: Any) -> bytes:
    """The one serialisation of `value` that is hashed and signed. Floats are refused: a receipt
    says fractions as decimal strings (`decimal`), so every language writes the same bytes."""
    _refuse_floats(value, "receipt")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _refuse_floats(value: Any, where: str) -> None:
    if isinstance(value, float):
        raise ReceiptError("malformed", f"{where} is a floating-point number; a receipt writes fractions as strings")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ReceiptError("malformed", f"{where} has a key that is not a string")
            _refuse_floats(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _refuse_floats(item, f"{where}[{index}]")


def decimal(value: float | None) -> str | None:
    """A fractional figure as a receipt writes it: Python's shortest round-trip form ("0.1",
    "12.0"), None kept as None (unknown is not zero)."""
    return None if value is None else repr(float(value))


def plain(value: Any) -> Any:
    """A JSON value (a run's limits, its egress totals) with every float written as `decimal`."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return decimal(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def digest(body: Mapping[str, Any]) -> str:
    """The receipt's hash: sha256 of its canonical bytes, hex; the next receipt of its host names it."""
    return hashlib.sha256(canonical(body)).hexdigest()


# --- keys ------------------------------------------------------------------------------------


# A process's keys by file, with the file's (device, inode, mtime, ctime) when read: every run's
# finish asks for the key, and a changed or replaced file (a rotated key) is read again. ctime,
# which no one can set back, catches a rewrite in place that kept the mtime.
_KEYS: dict[Path, tuple[tuple[int, int, int, int], Ed25519PrivateKey]] = {}


def site_key(path: Path) -> Ed25519PrivateKey:
    """The site's signing key, from its PEM file; made (mode 0600) if there is none yet. Several
    processes may ask at once: the file is written aside and linked into place, so each reads a
    whole key, and the one that lost the race reads the winner's."""
    if not path.exists():
        _create_key_file(path)
    with open(path, "rb") as handle:  # the stamp is of the file read
        seen = os.fstat(handle.fileno())
        stamp = (seen.st_dev, seen.st_ino, seen.st_mtime_ns, seen.st_ctime_ns)
        known = _KEYS.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        pem = handle.read()
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except ValueError as exc:
        raise ReceiptError("bad_key", f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ReceiptError("bad_key", f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    _KEYS[path] = (stamp, key)
    return key


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    aside = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(aside, path)  # never replaces a key already there
        except FileExistsError:
            pass
    finally:
        aside.unlink(missing_ok=True)


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The public key as Cordon writes it: "ed25519:" and the base64 of its 32 raw bytes."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KEY_PREFIX + base64.b64encode(raw).decode()


def key_id(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """A short name of a key (the first 16 hex digits of the sha256 of its public text), which each
    receipt carries so a reader can tell which key it needs."""
    return hashlib.sha256(public_key_text(key).encode()).hexdigest()[:16]


def parse_public_key(given: str) -> Ed25519PublicKey:
    """A public key from `given`: the text "ed25519:<base64>", or the path of a file holding that
    text or a PEM public key. A private key is refused: a verifier never needs one."""
    text = given.strip()
    if not text.startswith(KEY_PREFIX) and "-----BEGIN" not in text:
        try:
            text = Path(given).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ReceiptError(
                "bad_key", f"{given!r} is neither a key (ed25519:...) nor a readable key file: {exc}"
            ) from None
    if text.startswith(KEY_PREFIX):
        return _raw_public_key(text[len(KEY_PREFIX) :])
    if "PRIVATE KEY" in text:
        raise ReceiptError("bad_key", "that is a private key; give the public key (ed25519:..., /api/receipts/key)")
    try:
        key = serialization.load_pem_public_key(text.encode())
    except ValueError as exc:
        raise ReceiptError("bad_key", f"not an ed25519:... key or a PEM public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ReceiptError("bad_key", f"a {type(key).__name__}, not an Ed25519 public key")
    return key


def _raw_public_key(encoded: str) -> Ed25519PublicKey:
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ReceiptError("bad_key", "the text after ed25519: is not base64") from None
    if len(raw) != 32:
        raise ReceiptError("bad_key", f"an Ed25519 public key is 32 bytes, not {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


# --- signing and checking --------------------------------------------------------------------


def sign(body: Mapping[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """The receipt of `body`: the body itself, its hash and the signature of its canonical bytes."""
    data = canonical(body)
    return {
        "format": FORMAT,
        "receipt": dict(body),
        "sha256": hashlib.sha256(data).hexdigest(),
        "signature": base64.b64encode(key.sign(data)).decode(),
    }


def verify(document: Any, public: Ed25519PublicKey) -> dict[str, Any]:
    """The receipt's body, once its hash and its signature by `public` hold; ReceiptError otherwise."""
    body, stated, signature = _parts(document)
    data = canonical(body)
    if hashlib.sha256(data).hexdigest() != stated:
        raise ReceiptError("hash_mismatch", "the receipt's body does not match its sha256: it was changed")
    try:
        public.verify(signature, data)
    except InvalidSignature:
        signer = body.get("key_id")
        raise ReceiptError(
            "bad_signature", f"the signature does not hold for this key (id {key_id(public)}; the receipt names "
            f"{signer!r}): the receipt was changed, or signed with another key",
        ) from None  # fmt: skip
    return body


def _parts(document: Any) -> tuple[dict[str, Any], str, bytes]:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ReceiptError("malformed", f'not a receipt: a JSON object with "format": "{FORMAT}" is expected')
    body, stated, signature = document.get("receipt"), document.get("sha256"), document.get("signature")
    if not isinstance(body, dict):
        raise ReceiptError("malformed", 'the receipt has no "receipt" object')
    if body.get("version") != VERSION:
        raise ReceiptError("malformed", f"receipt version {body.get('version')!r}; this verifier reads {VERSION}")
    if not isinstance(stated, str) or len(stated) != HASH_HEX_CHARS:
        raise ReceiptError("malformed", 'the receipt has no "sha256" of 64 hex digits')
    try:
        raw = base64.b64decode(signature if isinstance(signature, str) else "", validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 64:
        raise ReceiptError("malformed", 'the receipt has no "signature" (base64 of 64 bytes)')
    return body, stated, raw


def load(text: str | bytes) -> Any:
    """A receipt file's JSON (not yet checked)."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReceiptError("malformed", f"not JSON: {exc}") from None


def chain_problems(bodies: list[dict[str, Any]], hashes: list[str]) -> list[str]:
    """What breaks the chain among checked receipts of one host given together: consecutive
    sequence numbers whose later one does not name the earlier one's hash."""
    problems = []
    ordered = sorted(zip(bodies, hashes, strict=True), key=lambda pair: _chain_key(pair[0]))
    for (before, before_hash), (after, _) in itertools.pairwise(ordered):
        b, a = before.get("chain") or {}, after.get("chain") or {}
        follows = b.get("host") == a.get("host") and a.get("sequence") == (b.get("sequence") or 0) + 1
        if follows and a.get("prev") != before_hash:
            problems.append(f"{a.get('host')} #{a.get('sequence')} does not follow #{b.get('sequence')}")
    return problems


def _chain_key(body: Mapping[str, Any]) -> tuple[str, int]:
    chain = body.get("chain") or {}
    return str(chain.get("host", "")), int(chain.get("sequence") or 0)


def facts(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A checked receipt's facts as (label, value) lines, as the CLI prints them."""
    run, chain = body.get("run") or {}, body.get("chain") or {}
    image, engine, times = run.get("image") or {}, run.get("engine") or {}, run.get("times") or {}
    cleanup, egress = run.get("cleanup") or {}, run.get("egress")

    def shown(value: Any) -> str:
        return "unknown" if value is None or value == "" else str(value)

    lines = [
        ("run", shown(run.get("id"))),
        ("outcome", f"{shown(run.get('outcome'))} ({shown(run.get('reason'))})"),
        ("exit", f"code {shown(run.get('exit_code'))}, signal {shown(run.get('signal'))}, "
         f"charged {shown(run.get('charged'))}"),
        ("engine", f"{shown(engine.get('name'))} {engine.get('version') or ''} ({shown(engine.get('isolation'))})"),
        ("image", f"{shown(image.get('name'))} {shown(image.get('digest'))}"),
        ("code sha256", shown(run.get("code_sha256"))),
        *[("input sha256", f"{i.get('sha256')} ({i.get('kind')})") for i in run.get("inputs") or []],
        *[("output sha256", f"{o.get('sha256')} ({o.get('size')} bytes)") for o in run.get("outputs") or []],
        ("wall, cpu", f"{shown(run.get('wall_s'))} s, {shown(run.get('cpu_s'))} s"),
        ("peaks", f"memory {shown(run.get('peak_memory_bytes'))} bytes, files {shown(run.get('peak_file_bytes'))}"),
        ("cleanup", f"{'ok' if cleanup.get('ok') else 'INCOMPLETE' if cleanup.get('ok') is False else 'unknown'}"
         f" ({len(cleanup.get('checks') or [])} checks)"),
        ("egress", "none" if egress is None else f"{egress.get('connections')} connections, "
         f"{egress.get('refused')} refused, {egress.get('bytes_out')} bytes out, {egress.get('bytes_in')} in"),
        ("created", shown(times.get("created_at"))),
        ("started", shown(times.get("started_at"))),
        ("finished", shown(times.get("finished_at"))),
        ("host", f"{shown(chain.get('host'))} #{shown(chain.get('sequence'))}"),
        ("previous", shown(chain.get("prev")) if chain.get("prev") else "none (the first of its host)"),
        ("key id", shown(body.get("key_id"))),
        ("receipt sha256", digest(body)),
    ]  # fmt: skip
    return lines
