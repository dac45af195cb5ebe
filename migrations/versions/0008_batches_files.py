"""OpenAI Files and Batches: uploaded files, batches and their per-line results

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0008'
down_revision: Union[str, Sequence[str], None] = '0007'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'files',
        sa.Column('seq', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('owner', sa.String(length=250), nullable=False),
        sa.Column('purpose', sa.String(length=40), nullable=False),
        sa.Column('filename', sa.String(length=500), nullable=False),
        sa.Column('bytes', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.Integer(), nullable=False),
        sa.Column('content', sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint('seq', name=op.f('pk_files')),
        sa.UniqueConstraint('id', name=op.f('uq_files_id')),
    )
    with op.batch_alter_table('files') as batch:
        batch.create_index('ix_files_owner_seq', ['owner', 'seq'], unique=False)
    op.create_table(
        'batches',
        sa.Column('seq', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('owner', sa.String(length=250), nullable=False),
        sa.Column('principal', sa.JSON(), nullable=False),
        sa.Column('endpoint', sa.String(length=100), nullable=False),
        sa.Column('input_file_id', sa.String(length=64), nullable=False),
        sa.Column('completion_window', sa.String(length=20), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('metadata', sa.JSON(), nullable=True),
        sa.Column('errors', sa.JSON(), nullable=True),
        sa.Column('output_file_id', sa.String(length=64), nullable=True),
        sa.Column('error_file_id', sa.String(length=64), nullable=True),
        sa.Column('total', sa.Integer(), nullable=False),
        sa.Column('completed', sa.Integer(), nullable=False),
        sa.Column('failed', sa.Integer(), nullable=False),
        *[sa.Column(name, sa.Integer(), nullable=nullable) for name, nullable in (
            ('created_at', False), ('expires_at', False), ('in_progress_at', True),
            ('finalizing_at', True), ('completed_at', True), ('failed_at', True),
            ('expired_at', True), ('cancelling_at', True), ('cancelled_at', True))],
        sa.Column('claimed_by', sa.String(length=200), nullable=True),
        sa.Column('lease_expires_at', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('seq', name=op.f('pk_batches')),
        sa.UniqueConstraint('id', name=op.f('uq_batches_id')),
    )
    with op.batch_alter_table('batches') as batch:
        batch.create_index('ix_batches_owner_seq', ['owner', 'seq'], unique=False)
        batch.create_index('ix_batches_status', ['status'], unique=False)
    op.create_table(
        'batch_results',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('batch_id', sa.String(length=64), nullable=False),
        sa.Column('line', sa.Integer(), nullable=False),
        sa.Column('ok', sa.Boolean(), nullable=False),
        sa.Column('record', sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], ondelete='CASCADE',
                                name=op.f('fk_batch_results_batch_id_batches')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_batch_results')),
        sa.UniqueConstraint('batch_id', 'line', name=op.f('uq_batch_results_batch_id_line')),
    )


def downgrade() -> None:
    op.drop_table('batch_results')
    op.drop_table('batches')
    op.drop_table('files')
