"""API keys of the engines a control plane starts: one per engine, derived from a secret.

Each engine's key is HMAC-SHA256(secret, "host:port") of the address it listens on, so the
supervisor that starts an engine and every gateway or controller that calls it compute the same
key without storing or sending it anywhere; a key seen on one engine opens no other. The
secret lives in `<data_dir>/engine.secret` (mode 0600, made by `inferplane up` or
`inferplane control-plane` on first start) or comes from the `engine_secret` setting.

    configure(secret)                   # once per process, at start-up
    key_for("http://127.0.0.1:8101/v1") # -> hex key, or None when no secret is configured
    headers_for(url)                    # -> {"authorization": "Bearer ..."} or {}
    keyed(engine, managed)              # is this backend called with its derived key?

Keyed are every builtin engine and every engine the control plane manages (a managed vLLM is
started with VLLM_API_KEY, see control_plane/supervisor.py); an external backend an operator
registers keeps whatever access it has of its own and is never sent a derived key.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from common.vocabulary import EngineKind

SECRET_FILE = "engine.secret"
_secret: bytes | None = None


def configure(secret: str | None) -> None:
    """Set (or with None, clear) the process's engine secret."""
    global _secret
    _secret = secret.encode() if secret else None


def key_for(url: str) -> str | None:
    return None if _secret is None else derive(_secret, url)


def derive(secret: bytes, url: str) -> str:
    """The key of the engine at `url` under `secret` (what key_for gives once configured)."""
    parts = urlsplit(url)
    address = f"{(parts.hostname or '').lower()}:{parts.port or 80}"
    return hmac.new(secret, address.encode(), hashlib.sha256).hexdigest()


def keyed(engine: str, managed: bool) -> bool:
    return managed or engine == EngineKind.BUILTIN


def headers_for(url: str) -> dict[str, str]:
    key = key_for(url)
    return {"authorization": f"Bearer {key}"} if key else {}


def load_secret(data_dir: str | os.PathLike, create: bool) -> str | None:
    """The secret in `data_dir`; with `create`, a new random one is written first if none is."""
    path = Path(data_dir) / SECRET_FILE
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it meanwhile: use theirs
            return path.read_text().strip() or None
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip() or None
