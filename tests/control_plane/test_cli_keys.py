"""`inferplane keys create` writes the key with its limits and budget (real CLI process)."""
from __future__ import annotations

import subprocess
import sys

import yaml
from sqlalchemy import select

from registry.db import make_session_factory
from registry.orm.access import ApiKey
from tests.conftest import ROOT


def test_keys_create_sets_limits_and_a_periodic_budget(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    config = tmp_path / "inferplane.yaml"
    config.write_text(yaml.safe_dump({"database_url": url, "data_dir": str(tmp_path)}))
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", "keys", "create", "--name", "ci", "--team", "ml",
         "--tpm-limit", "5000", "--max-budget", "12.5", "--budget-period", "week",
         "--config", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip().splitlines()[-1]
    assert secret.startswith("ip-") and "shown only once" in done.stderr
    with make_session_factory(url)() as session:
        key = session.scalars(select(ApiKey).where(ApiKey.name == "ci")).one()
        assert (key.team, key.tpm_limit, key.max_budget, key.budget_period) == \
            ("ml", 5000, 12.5, "week")
    bad = subprocess.run([sys.executable, "-m", "control_plane", "keys", "create", "--name", "x",
                          "--budget-period", "year", "--config", str(config)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'year'" in bad.stderr
