"""The registry's data model. Importing the package loads every table in dependency order."""
from registry import models as _models  # noqa: F401  (defines Base, then the access tables)
