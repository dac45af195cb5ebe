"""Who is calling, as every layer sees it: a `Principal` with a role; roles nest
(admin ⊇ operator ⊇ user).

    principal.may_use("llama-3-8b")      # the key's model allowlist
    principal.has_role(Role.OPERATOR)    # at least operator

`common.auth.authenticate` makes one from an API key or a JWT.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.vocabulary import Priority, Role

ROLE_RANK = {Role.USER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True)
class Principal:
    key_id: str
    name: str
    team: str | None
    role: str
    models: tuple[str, ...] | None   # None = every model
    priority: str = Priority.STANDARD
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    max_budget: float | None = None
    budget_period: str | None = None
    spend: float = 0.0  # recorded in SQL as of the snapshot

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models

    def has_role(self, role: str) -> bool:
        return ROLE_RANK.get(self.role, -1) >= ROLE_RANK[role]
