"""model modalities: the content types a model accepts (text-only unless declared)

Revision ID: 0005
Revises: 0006
Create Date: 2026-12-01 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0005'
down_revision: Union[str, Sequence[str], None] = '0006'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.add_column(sa.Column('modalities', sa.JSON(), nullable=False,
                                   server_default=sa.text("'[\"text\"]'")))


def downgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.drop_column('modalities')
