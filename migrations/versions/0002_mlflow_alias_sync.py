"""mlflow alias sync base: the alias state both registries last agreed on

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0002'
down_revision: Union[str, Sequence[str], None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('mlflow_alias_sync',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('target', sa.String(length=500), nullable=False),
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('alias', sa.String(length=100), nullable=False),
    sa.Column('version_label', sa.String(length=100), nullable=False),
    sa.Column('synced_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_mlflow_alias_sync')),
    sa.UniqueConstraint('target', 'model_name', 'alias',
                        name=op.f('uq_mlflow_alias_sync_target_model_name_alias'))
    )


def downgrade() -> None:
    op.drop_table('mlflow_alias_sync')
