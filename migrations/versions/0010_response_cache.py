"""response cache accounting (hits in the request log and usage)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0010'
down_revision: Union[str, Sequence[str], None] = '0009'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


USAGE_TABLES = ('usage', 'usage_hourly', 'usage_daily')


def upgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.add_column(sa.Column('cache', sa.JSON(), nullable=True))
    with op.batch_alter_table('request_log') as batch:
        batch.add_column(sa.Column('cache', sa.String(length=10), nullable=True))
    for table in USAGE_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('cache_hits', sa.Integer(), nullable=False,
                                       server_default='0'))


def downgrade() -> None:
    for table in USAGE_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column('cache_hits')
    with op.batch_alter_table('request_log') as batch:
        batch.drop_column('cache')
    with op.batch_alter_table('models') as batch:
        batch.drop_column('cache')
