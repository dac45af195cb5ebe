"""request log and usage rollups: per-request metadata for the console's request history, and
usage summed per hour and per day so month-long usage queries read hundreds of rows, not millions

Revision ID: 0006
Revises: 0003
Create Date: 2026-12-01 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0006'
down_revision: Union[str, Sequence[str], None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

ROLLUPS = {'usage_hourly': 'hour', 'usage_daily': 'day'}
ADDITIVE = ('requests', 'errors', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cost')


def upgrade() -> None:
    op.create_table(
        'request_log',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('request_id', sa.String(length=64), nullable=False),
        sa.Column('trace_id', sa.String(length=32), nullable=True),
        sa.Column('key_id', sa.Integer(), nullable=True),
        sa.Column('team', sa.String(length=200), nullable=True),
        sa.Column('model', sa.String(length=200), nullable=False),
        sa.Column('version', sa.String(length=100), nullable=True),
        sa.Column('backend', sa.String(length=100), nullable=True),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('http_status', sa.Integer(), nullable=False),
        sa.Column('stream', sa.Boolean(), nullable=False),
        sa.Column('prompt_tokens', sa.Integer(), nullable=False),
        sa.Column('completion_tokens', sa.Integer(), nullable=False),
        sa.Column('cost', sa.Float(), nullable=False),
        sa.Column('latency_ms', sa.Float(), nullable=False),
        sa.Column('ttft_ms', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_request_log')),
    )
    with op.batch_alter_table('request_log') as batch:
        batch.create_index(batch.f('ix_request_log_created_at'), ['created_at'], unique=False)
        batch.create_index('ix_request_log_model_id', ['model', 'id'], unique=False)
        batch.create_index('ix_request_log_key_id_id', ['key_id', 'id'], unique=False)

    for table in ROLLUPS:
        _create_rollup(table)
    _backfill()


def _create_rollup(table: str) -> None:
    op.create_table(
        table,
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('start', sa.DateTime(timezone=True), nullable=False),
        sa.Column('key_id', sa.Integer(), nullable=True),
        sa.Column('team', sa.String(length=200), nullable=True),
        sa.Column('model', sa.String(length=200), nullable=False),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in ADDITIVE[:-1]),
        sa.Column('cost', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'],
                                name=op.f(f'fk_{table}_key_id_api_keys'), ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id', name=op.f(f'pk_{table}')),
        sa.UniqueConstraint('start', 'key_id', 'team', 'model',
                            name=op.f(f'uq_{table}_start_key_id_team_model')),
    )
    with op.batch_alter_table(table) as batch:
        batch.create_index(batch.f(f'ix_{table}_start'), ['start'], unique=False)


def _backfill() -> None:
    """Existing per-minute usage summed into the new hourly and daily tables (UTC)."""
    sqlite = op.get_bind().dialect.name == 'sqlite'
    cols = ', '.join(ADDITIVE)
    sums = ', '.join(f'sum({c})' for c in ADDITIVE)
    for table, unit in ROLLUPS.items():
        fmt = '%Y-%m-%d %H:00:00.000000' if unit == 'hour' else '%Y-%m-%d 00:00:00.000000'
        start = (f"strftime('{fmt}', bucket_start)" if sqlite else
                 f"timezone('UTC', date_trunc('{unit}', timezone('UTC', bucket_start)))")
        op.execute(f"INSERT INTO {table} (start, key_id, team, model, {cols}) "
                   f"SELECT {start}, key_id, team, model, {sums} FROM usage "
                   f"GROUP BY {start}, key_id, team, model")


def downgrade() -> None:
    for table in ROLLUPS:
        with op.batch_alter_table(table) as batch:
            batch.drop_index(batch.f(f'ix_{table}_start'))
        op.drop_table(table)
    with op.batch_alter_table('request_log') as batch:
        batch.drop_index('ix_request_log_key_id_id')
        batch.drop_index('ix_request_log_model_id')
        batch.drop_index(batch.f('ix_request_log_created_at'))
    op.drop_table('request_log')
