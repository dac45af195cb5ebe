"""What the MLflow sync last saw both registries agree on, per (target, model, alias).

The sync is a three-way merge: comparing each side with this common base tells which side
moved an alias since the last sync, so a move on either side is propagated instead of being
overwritten by the other side's stale value. The rows are registry.orm.mlflow_state's.

    load_base(session, target, model_name)                  # {alias: agreed version label}
    save_base(session, target, model_name, alias, label)    # label None: agreed absent
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from registry.orm.mlflow_state import MlflowAliasState


def load_base(session: Session, target: str, model_name: str) -> dict[str, str]:
    rows = session.scalars(select(MlflowAliasState).where(
        MlflowAliasState.target == target, MlflowAliasState.model_name == model_name))
    return {row.alias: row.version_label for row in rows}


def save_base(session: Session, target: str, model_name: str, alias: str,
              label: str | None) -> None:
    """Record the agreed label; None means both sides agree the alias does not exist."""
    row = session.scalar(select(MlflowAliasState).where(
        MlflowAliasState.target == target, MlflowAliasState.model_name == model_name,
        MlflowAliasState.alias == alias))
    if label is None:
        if row is not None:
            session.execute(delete(MlflowAliasState).where(MlflowAliasState.id == row.id))
        return
    if row is None:
        session.add(MlflowAliasState(target=target, model_name=model_name, alias=alias,
                                     version_label=label))
    elif row.version_label != label:
        row.version_label = label
    session.flush()
