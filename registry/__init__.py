"""The registry's data model. Importing the package loads every table (registry.orm)."""
from registry import orm as _orm  # noqa: F401  (every table on one Base.metadata)
