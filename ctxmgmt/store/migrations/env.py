"""Alembic environment: runs on the connection ctxmgmt hands over (see store.migrate)."""

from alembic import context

from ctxmgmt.store.models import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
