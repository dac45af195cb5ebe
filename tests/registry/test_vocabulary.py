"""The shared vocabulary: each word defined once, stored and sent as the same plain string."""
from __future__ import annotations

import json

import orjson
import pytest
from sqlalchemy import CheckConstraint

from common.vocabulary import (BackendState, BreakerState, BudgetPeriod, Priority, Role,
                                RolloutPhase, RolloutState, Tier, VersionKind, VersionStatus,
                                values)
from registry.orm import catalog as models
from registry.orm.access import ApiKey, Team
from registry.orm.rollouts import Rollout


def allowed(table, column: str) -> str:
    """The SQL of the CHECK constraint that bounds `column`."""
    check = next(c for c in table.__table__.constraints
                 if isinstance(c, CheckConstraint) and c.name.endswith(f"{column}_allowed"))
    return str(check.sqltext)


@pytest.mark.parametrize("table,column,kind", [
    (models.Model, "tier", Tier), (models.Backend, "tier", Tier),
    (models.Backend, "state", BackendState), (models.ModelVersion, "kind", VersionKind),
    (models.ModelVersion, "status", VersionStatus), (Rollout, "state", RolloutState),
    (ApiKey, "role", Role), (ApiKey, "priority", Priority),
    (ApiKey, "budget_period", BudgetPeriod), (Team, "budget_period", BudgetPeriod),
])
def test_check_constraints_allow_exactly_the_enum(table, column, kind):
    # The text the migrations created: a new member needs a migration, and this says so.
    quoted = ", ".join(f"'{v}'" for v in kind)
    assert allowed(table, column) == f"{column} IN ({quoted})"


def test_members_are_their_strings_everywhere():
    assert Tier.HOT == "hot" and str(Tier.HOT) == "hot" and f"{Tier.HOT}" == "hot"
    assert json.dumps({"tier": Tier.COLD}) == '{"tier": "cold"}'
    assert orjson.dumps([Priority.BATCH]) == b'["batch"]'
    assert {"warm": 1}[Tier.WARM] == 1 and {Tier.WARM: 1}["warm"] == 1
    assert values(BudgetPeriod) == ("hour", "day", "week", "month")


def test_exported_state_codes_are_distinct_and_ordered():
    assert [s.code for s in BreakerState] == list(range(len(BreakerState)))
    assert [p.code for p in RolloutPhase] == list(range(len(RolloutPhase)))
    assert RolloutPhase.ROLLED_BACK.label == "rolled back"
