"""API key secrets: generated once, stored only as a sha256 hex digest."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "ip-"
DISPLAY_PREFIX_LEN = 10  # "ip-" plus 7 characters: enough to tell keys apart in a list


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(secret: str) -> str:
    # The secret has 256 bits of entropy, so a plain fast hash is safe here (no password
    # stretching needed) and keeps the per-request lookup cheap.
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def display_prefix(secret: str) -> str:
    return secret[:DISPLAY_PREFIX_LEN]
