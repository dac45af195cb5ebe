from tests.control_plane.conftest import env, env_any  # noqa: F401  (admin API on real databases)
from tests.registry.databases import any_url, pg_url, sqlite_url  # noqa: F401
