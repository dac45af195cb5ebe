"""Which control plane leads when several share one registry (see election.py)."""
