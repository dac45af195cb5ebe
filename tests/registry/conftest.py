from tests.registry.databases import any_url, migrated_sqlite_url, pg_url, sqlite_url  # noqa: F401
