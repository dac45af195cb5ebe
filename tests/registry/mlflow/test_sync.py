"""MLflow sync against a real MLflow tracking server: pull, push, alias moves both ways,
conflicts, idempotence, and clear errors."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from sqlalchemy import func, select

from registry.mlflow_merge import resolve_alias
from registry.mlflow_remote import MlflowUnavailable
from registry.mlflow_sync import MlflowSync
from registry.orm.audit import AuditLog
from registry.orm.catalog import AliasHistory
from registry.queries import (add_version, create_model, delete_alias, get_model,
                              get_snapshot_version, get_version, set_alias)
from tests.conftest import free_port


def mlflow_model(client, name, *versions, aliases=None):
    """versions: (source, tags) pairs; returns the MLflow version numbers."""
    client.create_registered_model(name, description=f"{name} from MLflow")
    numbers = [client.create_model_version(name, source, tags=tags, await_creation_for=0).version
               for source, tags in versions]
    for alias, index in (aliases or {}).items():
        client.set_registered_model_alias(name, alias, numbers[index])
    return numbers


def local_aliases(sessions, model_name):
    with sessions() as session:
        return {a.name: a.version.label for a in get_model(session, model_name).aliases}


def history(sessions, model_name, alias):
    with sessions() as session:
        rows = session.scalars(select(AliasHistory).where(
            AliasHistory.model_name == model_name, AliasHistory.alias == alias)
            .order_by(AliasHistory.id))
        return [(r.old_version, r.new_version, r.actor) for r in rows]


def counts(sessions):
    with sessions() as session:
        return (get_snapshot_version(session),
                session.scalar(select(func.count()).select_from(AuditLog)),
                session.scalar(select(func.count()).select_from(AliasHistory)))


def local_model(sessions, name, versions, aliases):
    """versions: label -> fields; aliases: alias -> label."""
    with sessions.begin() as session:
        model = create_model(session, name, description="served by inferplane")
        for label, fields in versions.items():
            add_version(session, model, label, **fields)
        for alias, label in aliases.items():
            set_alias(session, model, alias, label, "operator")


@pytest.mark.parametrize("base, ours, theirs, expected", [
    ("1", "1", "1", "1"), ("1", "1", "2", "2"), ("1", "2", "1", "2"), ("1", "2", "3", "2"),
    (None, None, "2", "2"), (None, "2", None, "2"), (None, "2", "3", "2"),
    ("1", None, "1", None), ("1", "1", None, None), ("1", None, "3", None),
])
def test_alias_merge_rules(base, ours, theirs, expected):
    assert resolve_alias(base, ours, theirs) == expected


def test_pull_imports_models_versions_aliases_and_follows_moves(sessions, client, mlflow_uri,
                                                                 prefix):
    numbers = mlflow_model(client, prefix + "llama",
                           ("hf://org/llama-a", {"inferplane.label": "a",
                                                 "inferplane.checksum": "sha256:aa",
                                                 "inferplane.precision": "q4_1"}),
                           ("s3://bucket/llama-2", {}),
                           aliases={"champion": 0, "challenger": 1})
    sync = MlflowSync(sessions, mlflow_uri, prefix=prefix)
    before = counts(sessions)[0]

    report = sync.pull()

    assert report.mlflow_changes == [] and report.skipped == []
    assert report.snapshot_version == before + 1
    with sessions() as session:
        model = get_model(session, "llama")
        assert model.description == f"{prefix}llama from MLflow"
        tagged = get_version(session, model, "a")
        assert (tagged.source_uri, tagged.checksum, tagged.precision) == \
            ("hf://org/llama-a", "sha256:aa", "q4_1")
        assert get_version(session, model, numbers[1]).source_uri == "s3://bucket/llama-2"
    assert local_aliases(sessions, "llama") == {"champion": "a", "challenger": numbers[1]}
    assert history(sessions, "llama", "champion") == [(None, "a", "mlflow-sync")]

    client.set_registered_model_alias(prefix + "llama", "champion", numbers[1])
    client.delete_registered_model_alias(prefix + "llama", "challenger")
    report = sync.pull()

    assert local_aliases(sessions, "llama") == {"champion": numbers[1]}
    assert history(sessions, "llama", "champion")[-1] == ("a", numbers[1], "mlflow-sync")
    assert history(sessions, "llama", "challenger")[-1] == (numbers[1], None, "mlflow-sync")
    assert report.snapshot_version == before + 2
    with sessions() as session:
        audited = session.scalars(select(AuditLog.action).where(
            AuditLog.actor == "mlflow-sync", AuditLog.resource_type == "alias")).all()
    assert sorted(audited) == ["delete_alias", "set_alias", "set_alias", "set_alias"]


def test_push_exports_versions_and_alias_changes(sessions, client, mlflow_uri, prefix):
    local_model(sessions, "qwen", {
        "v1": {"source_uri": "hf://Qwen/Qwen2.5-0.5B", "checksum": "sha256:11"},
        "v2": {"source_uri": "/models/qwen-v2.gguf", "precision": "bf16"},
    }, {"champion": "v1", "challenger": "v2", "latest": "v2"})
    sync = MlflowSync(sessions, mlflow_uri, prefix=prefix)
    name = prefix + "qwen"

    report = sync.push()

    assert report.inferplane_changes == [] and report.snapshot_version is None
    assert report.skipped == ["alias qwen:latest not exported: the name is reserved by MLflow"]
    versions = {mv.tags["inferplane.label"]: mv
                for mv in client.search_model_versions(f"name = '{name}'")}
    assert versions["v1"].source == "hf://Qwen/Qwen2.5-0.5B"
    assert versions["v1"].tags["inferplane.checksum"] == "sha256:11"
    # MLflow refuses local paths as sources: the real one rides in a tag.
    assert versions["v2"].source == "inferplane://qwen/v2"
    assert versions["v2"].tags["inferplane.source_uri"] == "/models/qwen-v2.gguf"
    assert client.get_registered_model(name).aliases == {
        "champion": versions["v1"].version, "challenger": versions["v2"].version}

    with sessions.begin() as session:
        model = get_model(session, "qwen")
        add_version(session, model, "v3", source_uri="hf://Qwen/Qwen2.5-1.5B")
        set_alias(session, model, "champion", "v3", "operator")
        delete_alias(session, model, "challenger", "operator")
    report = sync.push()

    v3 = client.get_model_version_by_alias(name, "champion")
    assert v3.tags["inferplane.label"] == "v3" and v3.source == "hf://Qwen/Qwen2.5-1.5B"
    assert client.get_registered_model(name).aliases == {"champion": v3.version}
    assert len(report.mlflow_changes) == 3  # v3 exported, champion moved, challenger deleted


def test_second_sync_changes_nothing(sessions, client, mlflow_uri, prefix):
    mlflow_model(client, prefix + "phi", ("hf://microsoft/phi-2", {}),
                 aliases={"champion": 0})
    local_model(sessions, "gemma", {"v1": {"source_uri": "hf://google/gemma"}},
                {"champion": "v1"})
    sync = MlflowSync(sessions, mlflow_uri, prefix=prefix)
    first = sync.sync_once("both")
    assert first.inferplane_changes and first.mlflow_changes
    settled = counts(sessions)

    for direction in ("both", "pull", "push"):
        again = sync.sync_once(direction)
        assert not again.changed and again.snapshot_version is None, again
    assert counts(sessions) == settled
    assert set(local_aliases(sessions, "phi")) == {"champion"}
    assert client.get_registered_model(prefix + "gemma").aliases.keys() == {"champion"}


def test_moves_on_both_sides_merge_and_inferplane_wins_conflicts(sessions, client, mlflow_uri,
                                                                 prefix):
    local_model(sessions, "mistral", {"v1": {}, "v2": {}, "v3": {}},
                {"champion": "v1", "challenger": "v1", "canary": "v1"})
    sync = MlflowSync(sessions, mlflow_uri, prefix=prefix)
    sync.push()
    name = prefix + "mistral"
    number = {mv.tags["inferplane.label"]: mv.version
              for mv in client.search_model_versions(f"name = '{name}'")}

    with sessions.begin() as session:  # Inferplane moves challenger and canary
        model = get_model(session, "mistral")
        set_alias(session, model, "challenger", "v2", "operator")
        set_alias(session, model, "canary", "v2", "operator")
    client.set_registered_model_alias(name, "champion", number["v3"])  # MLflow moves champion
    client.set_registered_model_alias(name, "canary", number["v3"])  # ...and canary: conflict

    pulled = sync.pull()  # one way: takes MLflow's move, keeps unpushed local moves
    assert local_aliases(sessions, "mistral") == {"champion": "v3", "challenger": "v2",
                                                  "canary": "v2"}
    assert pulled.mlflow_changes == []

    sync.sync_once("both")
    assert client.get_registered_model(name).aliases == {
        "champion": number["v3"], "challenger": number["v2"], "canary": number["v2"]}
    assert local_aliases(sessions, "mistral") == {"champion": "v3", "challenger": "v2",
                                                  "canary": "v2"}


def test_mlflow_names_inferplane_cannot_hold_are_reported(sessions, client, mlflow_uri, prefix):
    mlflow_model(client, prefix + "bad name", ("hf://x/y", {}))
    mlflow_model(client, prefix + "ok", ("hf://x/y", {}), ("hf://x/z", {"inferplane.label": "1"}),
                 aliases={"orphan": 0, "_private": 1})
    report = MlflowSync(sessions, mlflow_uri, prefix=prefix).pull()
    assert sorted(report.skipped) == [
        f"MLflow model {prefix}bad name not imported: Inferplane model names must match "
        r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        "alias ok:_private not imported: Inferplane aliases must match "
        r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        f"{prefix}ok alias orphan: version 1 has no usable label",
        f"{prefix}ok v1: label '1' is already used by another version",
    ]
    with sessions() as session:
        assert [v.source_uri for v in get_model(session, "ok").versions] == ["hf://x/z"]
    assert local_aliases(sessions, "ok") == {}


async def test_run_loop_syncs_until_stopped(sessions, client, mlflow_uri, prefix):
    mlflow_model(client, prefix + "loop", ("hf://x/loop", {}), aliases={"champion": 0})
    stop = asyncio.Event()
    task = asyncio.create_task(MlflowSync(sessions, mlflow_uri, prefix=prefix)
                               .run(0.1, stop=stop))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with sessions() as session:
            if get_snapshot_version(session) > 0:
                break
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert local_aliases(sessions, "loop") == {"champion": "1"}


def test_missing_mlflow_package_is_a_clear_error(sessions, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what an install without the extra sees
    sync = MlflowSync(sessions, "http://127.0.0.1:5000")  # constructing needs no mlflow
    with pytest.raises(MlflowUnavailable, match=r"pip install 'inferplane\[mlflow\]'"):
        sync.pull()


def test_unreachable_server_and_bad_arguments_fail_clearly(sessions):
    sync = MlflowSync(sessions, f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(MlflowUnavailable, match="not reachable"):
        sync.pull()
    assert time.monotonic() - started < 10
    with pytest.raises(ValueError, match="direction must be one of"):
        sync.sync_once("sideways")
    with pytest.raises(ValueError, match="interval_s"):
        asyncio.run(sync.run(0))
