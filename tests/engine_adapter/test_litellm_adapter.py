"""The LiteLLM adapter imports litellm only with its bundled model cost map selected, so the
import never reaches for the internet (litellm reads LITELLM_LOCAL_MODEL_COST_MAP at import)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_litellm_is_imported_with_its_local_cost_map(tmp_path):
    # a stand-in package recording what litellm itself would read while it is imported
    (tmp_path / "litellm").mkdir()
    (tmp_path / "litellm" / "__init__.py").write_text(
        "import os\nCOST_MAP_AT_IMPORT = os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP')\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from engine_adapter.litellm_adapter import _litellm;"
            "print(_litellm().COST_MAP_AT_IMPORT)")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
