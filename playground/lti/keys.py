"""The tool's signing key (site-wide, see ToolKey) and the JWKS that publishes its public half."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.db import IntegrityError, transaction
from pylti1p3.registration import Registration

from playground.lti.models import ToolKey

KEY_BITS = 2048


def signing_key() -> ToolKey:
    """The newest unretired key; the first call on a new site makes one."""
    key = ToolKey.objects.filter(retired_at__isnull=True).first()
    return key if key is not None else key_create()


def key_create() -> ToolKey:
    """A new key pair; it signs from now on, and the older ones stay published until retired."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    private_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    kid = Registration.get_jwk(public_pem)["kid"]  # the thumbprint pylti1p3 puts in every header it signs
    try:
        with transaction.atomic():
            return ToolKey.objects.create(kid=kid, private_key_pem=private_pem, public_key_pem=public_pem)
    except IntegrityError:  # cannot happen twice for fresh keys; kept for a clear failure
        return ToolKey.objects.get(kid=kid)


def jwks() -> dict[str, Any]:
    """Public keys only: each unretired key as a JWK (kty, n, e, kid, alg, use)."""
    keys = ToolKey.objects.filter(retired_at__isnull=True).order_by("-created_at")
    if not keys:
        keys = [signing_key()]  # type: ignore[assignment]
    return {"keys": [dict(Registration.get_jwk(key.public_key_pem)) for key in keys]}
