"""Alembic migrations of the schema; `marketplace migrate` runs them."""
