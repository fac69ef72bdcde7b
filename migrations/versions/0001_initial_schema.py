"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02 16:31:28.546710

"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('tenants',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('slug', sa.String(length=63), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('time_zone', sa.String(length=64), nullable=False),
    sa.Column('max_schedules', sa.Integer(), nullable=True),
    sa.Column('min_interval_seconds', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tenants')),
    sa.UniqueConstraint('slug', name=op.f('uq_tenants_slug'))
    )
    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('email', sa.String(length=254), nullable=False),
    sa.Column('password_hash', sa.String(length=255), nullable=False),
    sa.Column('is_operator', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_login_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('email', name=op.f('uq_users_email'))
    )
    op.create_table('workers',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('hostname', sa.String(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_heartbeat_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('stopped_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_workers'))
    )
    op.create_table('audit_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=True),
    sa.Column('actor_id', sa.Integer(), nullable=True),
    sa.Column('actor_label', sa.String(length=254), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('object_type', sa.String(length=32), nullable=False),
    sa.Column('object_id', sa.Integer(), nullable=True),
    sa.Column('object_label', sa.String(length=200), nullable=True),
    sa.Column('before', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('after', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['actor_id'], ['users.id'], name=op.f('fk_audit_events_actor_id_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_audit_events_tenant_id_tenants'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_events'))
    )
    with op.batch_alter_table('audit_events', schema=None) as batch_op:
        batch_op.create_index('ix_audit_events_tenant_history', ['tenant_id', 'id'], unique=False)

    op.create_table('memberships',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.CheckConstraint("role IN ('admin', 'viewer')", name=op.f('ck_memberships_role')),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_memberships_tenant_id_tenants'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_memberships_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_memberships')),
    sa.UniqueConstraint('user_id', 'tenant_id', name=op.f('uq_memberships_user_id_tenant_id'))
    )
    with op.batch_alter_table('memberships', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_memberships_tenant_id'), ['tenant_id'], unique=False)

    op.create_table('schedules',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=True),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('job', sa.String(length=200), nullable=False),
    sa.Column('args', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('cron', sa.String(length=200), nullable=False),
    sa.Column('time_zone', sa.String(length=64), nullable=False),
    sa.Column('active', sa.Boolean(), nullable=False),
    sa.Column('inactive_reason', sa.Text(), nullable=True),
    sa.Column('misfire_policy', sa.String(length=16), nullable=False),
    sa.Column('overlap_policy', sa.String(length=16), nullable=False),
    sa.Column('next_run_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_run_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_by', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("(scope = 'system' AND tenant_id IS NULL) OR (scope = 'tenant' AND tenant_id IS NOT NULL)", name=op.f('ck_schedules_scope_tenant')),
    sa.CheckConstraint("misfire_policy IN ('fire_once', 'fire_all', 'skip')", name=op.f('ck_schedules_misfire_policy')),
    sa.CheckConstraint("overlap_policy IN ('allow', 'skip')", name=op.f('ck_schedules_overlap_policy')),
    sa.CheckConstraint("scope IN ('tenant', 'system')", name=op.f('ck_schedules_scope')),
    sa.ForeignKeyConstraint(['created_by'], ['users.id'], name=op.f('fk_schedules_created_by_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_schedules_tenant_id_tenants'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_schedules')),
    sa.UniqueConstraint('tenant_id', 'key', name=op.f('uq_schedules_tenant_id_key'))
    )
    with op.batch_alter_table('schedules', schema=None) as batch_op:
        batch_op.create_index('ix_schedules_due', ['next_run_at'], unique=False, postgresql_where=sa.text('active'), sqlite_where=sa.text('active'))
        batch_op.create_index('uq_schedules_system_key', ['key'], unique=True, postgresql_where=sa.text('tenant_id IS NULL'), sqlite_where=sa.text('tenant_id IS NULL'))

    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=True),
    sa.Column('schedule_id', sa.Integer(), nullable=True),
    sa.Column('job', sa.String(length=200), nullable=False),
    sa.Column('args', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('trigger', sa.String(length=16), nullable=False),
    sa.Column('scheduled_for', sa.DateTime(timezone=True), nullable=False),
    sa.Column('idempotency_key', sa.String(length=200), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('fires_covered', sa.Integer(), nullable=False),
    sa.Column('queued_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('available_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('worker_id', sa.Integer(), nullable=True),
    sa.Column('locked_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('output', sa.Text(), nullable=True),
    sa.Column('requested_by', sa.Integer(), nullable=True),
    sa.CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed', 'skipped')", name=op.f('ck_runs_status')),
    sa.CheckConstraint('"trigger" IN (\'schedule\', \'manual\', \'catchup\')', name=op.f('ck_runs_trigger')),
    sa.ForeignKeyConstraint(['requested_by'], ['users.id'], name=op.f('fk_runs_requested_by_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['schedule_id'], ['schedules.id'], name=op.f('fk_runs_schedule_id_schedules'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_runs_tenant_id_tenants'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['worker_id'], ['workers.id'], name=op.f('fk_runs_worker_id_workers'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs')),
    sa.UniqueConstraint('idempotency_key', name=op.f('uq_runs_idempotency_key'))
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_leases', ['locked_until'], unique=False, postgresql_where=sa.text("status = 'running'"), sqlite_where=sa.text("status = 'running'"))
        batch_op.create_index('ix_runs_queue', ['available_at'], unique=False, postgresql_where=sa.text("status = 'queued'"), sqlite_where=sa.text("status = 'queued'"))
        batch_op.create_index('ix_runs_schedule_history', ['schedule_id', 'id'], unique=False)
        batch_op.create_index('ix_runs_tenant_history', ['tenant_id', 'id'], unique=False)
        batch_op.create_index('uq_runs_schedule_id_scheduled_for', ['schedule_id', 'scheduled_for'], unique=True, postgresql_where=sa.text('"trigger" <> \'manual\''), sqlite_where=sa.text('"trigger" <> \'manual\''))



def downgrade():
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('uq_runs_schedule_id_scheduled_for', postgresql_where=sa.text('"trigger" <> \'manual\''), sqlite_where=sa.text('"trigger" <> \'manual\''))
        batch_op.drop_index('ix_runs_tenant_history')
        batch_op.drop_index('ix_runs_schedule_history')
        batch_op.drop_index('ix_runs_queue', postgresql_where=sa.text("status = 'queued'"), sqlite_where=sa.text("status = 'queued'"))
        batch_op.drop_index('ix_runs_leases', postgresql_where=sa.text("status = 'running'"), sqlite_where=sa.text("status = 'running'"))

    op.drop_table('runs')
    with op.batch_alter_table('schedules', schema=None) as batch_op:
        batch_op.drop_index('uq_schedules_system_key', postgresql_where=sa.text('tenant_id IS NULL'), sqlite_where=sa.text('tenant_id IS NULL'))
        batch_op.drop_index('ix_schedules_due', postgresql_where=sa.text('active'), sqlite_where=sa.text('active'))

    op.drop_table('schedules')
    with op.batch_alter_table('memberships', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_memberships_tenant_id'))

    op.drop_table('memberships')
    with op.batch_alter_table('audit_events', schema=None) as batch_op:
        batch_op.drop_index('ix_audit_events_tenant_history')

    op.drop_table('audit_events')
    op.drop_table('workers')
    op.drop_table('users')
    op.drop_table('tenants')
