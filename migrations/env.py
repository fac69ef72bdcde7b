"""Alembic environment for Flask-Migrate: the app's engine and the models' metadata."""

import logging
from logging.config import fileConfig

from alembic import context
from flask import current_app

config = context.config
if config.config_file_name and not logging.getLogger().handlers:
    fileConfig(config.config_file_name)
logger = logging.getLogger("alembic.env")

migrate_extension = current_app.extensions["migrate"]
target_metadata = migrate_extension.db.metadata
config.set_main_option(
    "sqlalchemy.url",
    migrate_extension.db.engine.url.render_as_string(hide_password=False).replace("%", "%%"),
)


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    def skip_empty_revisions(context, revision, directives):  # type: ignore[no-untyped-def]
        if getattr(config.cmd_opts, "autogenerate", False) and directives[0].upgrade_ops.is_empty():
            directives[:] = []
            logger.info("No changes in schema detected.")

    conf_args = dict(migrate_extension.configure_args)
    conf_args.setdefault("process_revision_directives", skip_empty_revisions)
    with migrate_extension.db.engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # Rebuilding a table (SQLite's only way to change most of a definition) drops it;
            # with foreign keys on, the drop would cascade to the rows that refer to it. The
            # pragma only works outside a transaction, hence on the driver's connection before
            # the migration's transaction begins; migrations check the keys before committing.
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            context.configure(connection=connection, target_metadata=target_metadata, **conf_args)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            if sqlite:
                connection.rollback()
                connection.connection.driver_connection.execute("PRAGMA foreign_keys=ON")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
