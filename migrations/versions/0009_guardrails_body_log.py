"""guardrail policies and request/response body logging

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0009'
down_revision: Union[str, Sequence[str], None] = '0008'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'guardrail_policies',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('spec', sa.JSON(), nullable=False),
        sa.Column('row_version', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_guardrail_policies')),
        sa.UniqueConstraint('name', name=op.f('uq_guardrail_policies_name')),
    )
    op.create_table(
        'guardrail_bindings',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('policy_id', sa.Integer(), nullable=False),
        sa.Column('model', sa.String(length=200), nullable=True),
        sa.Column('key_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint('(model IS NULL) <> (key_id IS NULL)',
                           name=op.f('ck_guardrail_bindings_one_target')),
        sa.ForeignKeyConstraint(['policy_id'], ['guardrail_policies.id'],
                                name=op.f('fk_guardrail_bindings_policy_id_guardrail_policies'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'],
                                name=op.f('fk_guardrail_bindings_key_id_api_keys'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_guardrail_bindings')),
        sa.UniqueConstraint('model', name=op.f('uq_guardrail_bindings_model')),
        sa.UniqueConstraint('key_id', name=op.f('uq_guardrail_bindings_key_id')),
    )
    with op.batch_alter_table('guardrail_bindings') as batch:
        batch.create_index(batch.f('ix_guardrail_bindings_policy_id'), ['policy_id'],
                           unique=False)
    op.create_table(
        'request_bodies',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('request_id', sa.String(length=64), nullable=False),
        sa.Column('key_id', sa.Integer(), nullable=True),
        sa.Column('model', sa.String(length=200), nullable=False),
        sa.Column('policy', sa.String(length=200), nullable=True),
        sa.Column('mode', sa.String(length=20), nullable=False),
        sa.Column('request_body', sa.Text(), nullable=True),
        sa.Column('response_body', sa.Text(), nullable=True),
        sa.Column('request_chars', sa.Integer(), nullable=False),
        sa.Column('response_chars', sa.Integer(), nullable=False),
        sa.Column('request_truncated', sa.Boolean(), nullable=False),
        sa.Column('response_truncated', sa.Boolean(), nullable=False),
        sa.Column('findings', sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_request_bodies')),
    )
    with op.batch_alter_table('request_bodies') as batch:
        batch.create_index(batch.f('ix_request_bodies_created_at'), ['created_at'],
                           unique=False)
        batch.create_index('ix_request_bodies_request_id', ['request_id'], unique=False)


def downgrade() -> None:
    op.drop_table('request_bodies')
    op.drop_table('guardrail_bindings')
    op.drop_table('guardrail_policies')
