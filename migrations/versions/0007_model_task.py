"""model task: chat (the default) or embedding, so clients and the console can tell an
embedding model from one that chats

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-06 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0007'
down_revision: Union[str, Sequence[str], None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.add_column(sa.Column('task', sa.String(length=20), nullable=False,
                                   server_default='chat'))
        batch.create_check_constraint(batch.f('ck_models_task_allowed'),
                                      "task IN ('chat', 'embedding')")


def downgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.drop_constraint(batch.f('ck_models_task_allowed'), type_='check')
        batch.drop_column('task')
