"""Two Inferplane registries meeting through one MLflow registry: what one pushes, the other
pulls back intact (labels, sources, fields, LoRA bases, aliases)."""

from __future__ import annotations

from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.mlflow_sync import MlflowSync
from registry.queries import add_version, create_model, get_model, get_version, set_alias


def test_push_then_pull_into_another_registry(sessions, mlflow_uri, prefix, tmp_path):
    with sessions.begin() as session:
        model = create_model(session, "llama-3", description="base + adapters")
        add_version(session, model, "2024-05", source_uri="/srv/llama.gguf",
                    checksum="sha256:ab", precision="q4_1", engine="builtin")
        add_version(session, model, "sql-lora", kind="lora", base_version="2024-05",
                    source_uri="hf://acme/sql-lora")
        set_alias(session, model, "champion", "2024-05", "operator")
        set_alias(session, model, "sql", "sql-lora", "operator")
    MlflowSync(sessions, mlflow_uri, prefix=prefix).push()

    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    upgrade(other_url, progress=None)
    other = make_session_factory(other_url)
    report = MlflowSync(other, mlflow_uri, prefix=prefix, actor="replica").pull()

    assert report.skipped == [] and report.snapshot_version == 1
    with other() as session:
        model = get_model(session, "llama-3")
        base = get_version(session, model, "2024-05")
        assert (base.source_uri, base.checksum, base.precision, base.engine, base.kind) == \
            ("/srv/llama.gguf", "sha256:ab", "q4_1", "builtin", "full")
        lora = get_version(session, model, "sql-lora")
        assert (lora.kind, lora.base_version_id, lora.source_uri) == \
            ("lora", base.id, "hf://acme/sql-lora")
        assert {a.name: a.version.label for a in model.aliases} == \
            {"champion": "2024-05", "sql": "sql-lora"}
    other.kw["bind"].dispose()
