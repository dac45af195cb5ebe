"""initial schema: catalogue, access control, usage, audit, registry state

Revision ID: 0001
Revises: 
Create Date: 2025-01-01 00:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision: str = '0001'
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table('alias_history',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('alias', sa.String(length=100), nullable=False),
    sa.Column('old_version', sa.String(length=100), nullable=True),
    sa.Column('new_version', sa.String(length=100), nullable=True),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alias_history'))
    )
    with op.batch_alter_table('alias_history', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_alias_history_model_name'), ['model_name'], unique=False)

    op.create_table('api_keys',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=20), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('team', sa.String(length=200), nullable=True),
    sa.Column('role', sa.String(length=20), nullable=False),
    sa.Column('models', sa.JSON(), nullable=True),
    sa.Column('rpm_limit', sa.Integer(), nullable=True),
    sa.Column('tpm_limit', sa.Integer(), nullable=True),
    sa.Column('max_budget', sa.Float(), nullable=True),
    sa.Column('spend', sa.Float(), nullable=False),
    sa.Column('priority', sa.String(length=20), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("priority IN ('high', 'standard', 'batch')", name=op.f('ck_api_keys_priority_allowed')),
    sa.CheckConstraint("role IN ('admin', 'operator', 'user')", name=op.f('ck_api_keys_role_allowed')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')),
    sa.UniqueConstraint('key_hash', name=op.f('uq_api_keys_key_hash'))
    )
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_keys_team'), ['team'], unique=False)

    op.create_table('audit_log',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.Column('action', sa.String(length=50), nullable=False),
    sa.Column('resource_type', sa.String(length=50), nullable=False),
    sa.Column('resource_id', sa.String(length=300), nullable=False),
    sa.Column('before', sa.JSON(), nullable=True),
    sa.Column('after', sa.JSON(), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_log'))
    )
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_log_at'), ['at'], unique=False)

    op.create_table('models',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('context_length', sa.Integer(), nullable=True),
    sa.Column('routing', sa.String(length=50), nullable=True),
    sa.Column('fallbacks', sa.JSON(), nullable=False),
    sa.Column('tier', sa.String(length=10), nullable=False),
    sa.Column('price_in_per_1k', sa.Float(), nullable=False),
    sa.Column('price_out_per_1k', sa.Float(), nullable=False),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("tier IN ('hot', 'warm', 'cold')", name=op.f('ck_models_tier_allowed')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_models')),
    sa.UniqueConstraint('name', name=op.f('uq_models_name'))
    )
    op.create_table('registry_state',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_registry_state'))
    )
    # The single row whose version readers poll; every registry change bumps it.
    op.execute(sa.text("INSERT INTO registry_state (id, version, updated_at) "
                       "VALUES (1, 0, CURRENT_TIMESTAMP)"))
    op.create_table('teams',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('rpm_limit', sa.Integer(), nullable=True),
    sa.Column('tpm_limit', sa.Integer(), nullable=True),
    sa.Column('max_budget', sa.Float(), nullable=True),
    sa.Column('spend', sa.Float(), nullable=False),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_teams')),
    sa.UniqueConstraint('name', name=op.f('uq_teams_name'))
    )
    op.create_table('model_versions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('label', sa.String(length=100), nullable=False),
    sa.Column('kind', sa.String(length=10), nullable=False),
    sa.Column('base_version_id', sa.Integer(), nullable=True),
    sa.Column('source_uri', sa.Text(), nullable=True),
    sa.Column('engine', sa.String(length=50), nullable=True),
    sa.Column('engine_args', sa.JSON(), nullable=False),
    sa.Column('precision', sa.String(length=20), nullable=True),
    sa.Column('checksum', sa.String(length=128), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("kind IN ('full', 'lora')", name=op.f('ck_model_versions_kind_allowed')),
    sa.CheckConstraint("status IN ('registered', 'ready', 'deprecated', 'archived')", name=op.f('ck_model_versions_status_allowed')),
    sa.ForeignKeyConstraint(['base_version_id'], ['model_versions.id'], name=op.f('fk_model_versions_base_version_id_model_versions'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_model_versions_model_id_models'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_model_versions')),
    sa.UniqueConstraint('model_id', 'label', name=op.f('uq_model_versions_model_id_label'))
    )
    with op.batch_alter_table('model_versions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_model_versions_model_id'), ['model_id'], unique=False)

    op.create_table('slos',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=True),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('metric', sa.String(length=50), nullable=False),
    sa.Column('objective', sa.Float(), nullable=False),
    sa.Column('threshold_ms', sa.Float(), nullable=True),
    sa.Column('window_s', sa.Integer(), nullable=False),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_slos_model_id_models'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_slos')),
    sa.UniqueConstraint('model_id', 'name', name=op.f('uq_slos_model_id_name'))
    )
    op.create_table('usage',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('bucket_start', sa.DateTime(timezone=True), nullable=False),
    sa.Column('key_id', sa.Integer(), nullable=True),
    sa.Column('team', sa.String(length=200), nullable=True),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('requests', sa.Integer(), nullable=False),
    sa.Column('errors', sa.Integer(), nullable=False),
    sa.Column('prompt_tokens', sa.Integer(), nullable=False),
    sa.Column('completion_tokens', sa.Integer(), nullable=False),
    sa.Column('cached_tokens', sa.Integer(), nullable=False),
    sa.Column('cost', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'], name=op.f('fk_usage_key_id_api_keys'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_usage')),
    sa.UniqueConstraint('bucket_start', 'key_id', 'model', name=op.f('uq_usage_bucket_start_key_id_model'))
    )
    with op.batch_alter_table('usage', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_usage_bucket_start'), ['bucket_start'], unique=False)

    op.create_table('adapters',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('base_version_id', sa.Integer(), nullable=True),
    sa.Column('source_uri', sa.Text(), nullable=True),
    sa.Column('rank', sa.Integer(), nullable=True),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['base_version_id'], ['model_versions.id'], name=op.f('fk_adapters_base_version_id_model_versions'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_adapters_model_id_models'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_adapters')),
    sa.UniqueConstraint('model_id', 'name', name=op.f('uq_adapters_model_id_name'))
    )
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_adapters_model_id'), ['model_id'], unique=False)

    op.create_table('aliases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_aliases_model_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['version_id'], ['model_versions.id'], name=op.f('fk_aliases_version_id_model_versions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_aliases')),
    sa.UniqueConstraint('model_id', 'name', name=op.f('uq_aliases_model_id_name'))
    )
    with op.batch_alter_table('aliases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_aliases_model_id'), ['model_id'], unique=False)

    op.create_table('backends',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=True),
    sa.Column('url', sa.String(length=500), nullable=False),
    sa.Column('engine', sa.String(length=50), nullable=False),
    sa.Column('served_model', sa.String(length=200), nullable=False),
    sa.Column('gpu_type', sa.String(length=50), nullable=True),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('tier', sa.String(length=10), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('managed', sa.Boolean(), nullable=False),
    sa.Column('command', sa.JSON(), nullable=True),
    sa.Column('port', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('starting', 'ready', 'down', 'draining')", name=op.f('ck_backends_state_allowed')),
    sa.CheckConstraint("tier IN ('hot', 'warm', 'cold')", name=op.f('ck_backends_tier_allowed')),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_backends_model_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['version_id'], ['model_versions.id'], name=op.f('fk_backends_version_id_model_versions'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_backends')),
    sa.UniqueConstraint('model_id', 'url', 'served_model', name=op.f('uq_backends_model_id_url_served_model'))
    )
    with op.batch_alter_table('backends', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_backends_model_id'), ['model_id'], unique=False)

    op.create_table('rollouts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('from_version_id', sa.Integer(), nullable=True),
    sa.Column('to_version_id', sa.Integer(), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('measurements', sa.JSON(), nullable=False),
    sa.Column('row_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('pending', 'running', 'paused', 'promoted', 'rolled_back', 'aborted')", name=op.f('ck_rollouts_state_allowed')),
    sa.ForeignKeyConstraint(['from_version_id'], ['model_versions.id'], name=op.f('fk_rollouts_from_version_id_model_versions'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_rollouts_model_id_models'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['to_version_id'], ['model_versions.id'], name=op.f('fk_rollouts_to_version_id_model_versions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rollouts'))
    )
    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rollouts_model_id'), ['model_id'], unique=False)

    op.create_table('backend_adapters',
    sa.Column('backend_id', sa.Integer(), nullable=False),
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('loaded_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'], name=op.f('fk_backend_adapters_adapter_id_adapters'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['backend_id'], ['backends.id'], name=op.f('fk_backend_adapters_backend_id_backends'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('backend_id', 'adapter_id', name=op.f('pk_backend_adapters'))
    )
    op.create_table('rollout_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('rollout_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('kind', sa.String(length=50), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('measurements', sa.JSON(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['rollout_id'], ['rollouts.id'], name=op.f('fk_rollout_events_rollout_id_rollouts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rollout_events'))
    )
    with op.batch_alter_table('rollout_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rollout_events_rollout_id'), ['rollout_id'], unique=False)



def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table('rollout_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rollout_events_rollout_id'))

    op.drop_table('rollout_events')
    op.drop_table('backend_adapters')
    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rollouts_model_id'))

    op.drop_table('rollouts')
    with op.batch_alter_table('backends', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_backends_model_id'))

    op.drop_table('backends')
    with op.batch_alter_table('aliases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_aliases_model_id'))

    op.drop_table('aliases')
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_adapters_model_id'))

    op.drop_table('adapters')
    with op.batch_alter_table('usage', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_usage_bucket_start'))

    op.drop_table('usage')
    op.drop_table('slos')
    with op.batch_alter_table('model_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_model_versions_model_id'))

    op.drop_table('model_versions')
    op.drop_table('teams')
    op.drop_table('registry_state')
    op.drop_table('models')
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_log_at'))

    op.drop_table('audit_log')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_keys_team'))

    op.drop_table('api_keys')
    with op.batch_alter_table('alias_history', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_alias_history_model_name'))

    op.drop_table('alias_history')
