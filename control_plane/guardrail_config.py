"""The YAML `guardrails:` section written into the registry at start: each named policy
created or its spec replaced (the file is the source of truth for the policies it names;
those made through the admin API are left alone), then its model and key bindings.

    register_guardrails(sessions, settings)     # in running_fleet, after the models
"""
from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from common.guardrail_spec import GuardrailSettings
from registry.guardrails import bind_policy, upsert_policy
from registry.orm.access import ApiKey
from registry.queries import bump_snapshot_version

log = logging.getLogger("inferplane.control_plane")


def register_guardrails(sessions: sessionmaker, config: GuardrailSettings) -> list[str]:
    """Write the configured policies and bindings; the key names no key carries (warned)."""
    if not config.policies:
        return []
    missing: list[str] = []
    with sessions.begin() as session:
        rows = {name: upsert_policy(session, name, spec.model_dump(mode="json"))
                for name, spec in config.policies.items()}
        for model, policy in config.models.items():
            bind_policy(session, rows[policy], model=model)
        for key_name, policy in config.keys.items():
            ids = session.scalars(select(ApiKey.id).where(ApiKey.name == key_name)).all()
            if not ids:
                missing.append(key_name)
            for key_id in ids:
                bind_policy(session, rows[policy], key_id=key_id)
        bump_snapshot_version(session)
    for name in missing:
        log.warning("guardrails.keys.%s: no API key has this name; binding skipped", name)
    return missing


__all__ = ["register_guardrails"]
