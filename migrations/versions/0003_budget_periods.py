"""budget periods: keys and teams may reset their budget every hour, day, week or month

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0003'
down_revision: Union[str, Sequence[str], None] = '0002'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TABLES = ('api_keys', 'teams')
PERIODS = "budget_period IN ('hour', 'day', 'week', 'month')"


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('budget_period', sa.String(length=10), nullable=True))
            batch.create_check_constraint(op.f(f'ck_{table}_budget_period_allowed'), PERIODS)


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(op.f(f'ck_{table}_budget_period_allowed'), type_='check')
            batch.drop_column('budget_period')
