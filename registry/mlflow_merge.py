"""One model's sync between Inferplane and MLflow: missing models and versions are created on
the destination side, then every alias is merged three ways against the last agreed state.

Conflict rules (per alias, `base` = what both sides agreed on at the last sync):
- both sides equal: nothing to do;
- only one side differs from base: that side moved it (or deleted it), the move wins;
- both moved differently: Inferplane wins, since it is what serves traffic.
With no base yet (first sync) an alias present on one side only is copied to the other.
A one-way direction writes only its destination, so `pull` never undoes a local move that has
not been pushed yet, and `push` never undoes a move made in MLflow. Versions are never
deleted or rewritten, and deleting a whole model is not propagated."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.vocabulary import VersionKind
from registry.errors import RegistryError
from registry.mlflow_remote import (FIELD_TAGS, TAG_BASE, TAG_KIND, TAG_LABEL, TAG_SOURCE,
                                    MlflowRegistry, RemoteModel, mlflow_alias_problem,
                                    mlflow_source)
from registry.mlflow_state import load_base, save_base
from registry.orm.catalog import Alias, Model, ModelVersion
from registry.queries import add_version, audit, delete_alias, set_alias, upsert_model
from registry.serialize import row_to_dict

# The admin API's rule for model and alias names; MLflow allows names Inferplane cannot route.
LOCAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def resolve_alias(base: str | None, ours: str | None, theirs: str | None) -> str | None:
    """The label the alias should point to after the merge (None: it should not exist)."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return ours


@dataclass
class SyncReport:
    """What one sync run changed on each side, and what it skipped and why (filled in by
    each model's merge; returned by registry.mlflow_sync.MlflowSync)."""

    direction: str
    inferplane_changes: list[str] = field(default_factory=list)
    mlflow_changes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # things that could not be synced, why
    snapshot_version: int | None = None  # the new version when Inferplane changed

    @property
    def changed(self) -> bool:
        return bool(self.inferplane_changes or self.mlflow_changes)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changed": self.changed}


@dataclass
class SyncTarget:
    registry: MlflowRegistry
    target: str  # key of the agreed-state rows
    actor: str
    pulls: bool
    pushes: bool


class ModelMerge:
    def __init__(self, sync: SyncTarget, session: Session, report: SyncReport, name: str,
                 mlflow_name: str, local: Model | None, remote: RemoteModel | None):
        self.sync, self.session, self.report = sync, session, report
        self.name, self.mlflow_name = name, mlflow_name
        self.local, self.remote = local, remote

    def run(self) -> None:
        if self.sync.pulls and self.remote is not None:
            self._pull_model()
        if self.sync.pushes and self.local is not None:
            self._push_model()
        if self.local is not None and self.remote is not None:
            self._merge_aliases()

    # --- MLflow -> Inferplane ----------------------------------------------------------

    def _pull_model(self) -> None:
        if self.local is None:
            self.local, _ = upsert_model(self.session, self.name,
                                         description=self.remote.description)
            self._local_change("create", "model", self.name, row_to_dict(self.local),
                               f"created model {self.name}")
        known = set(self.session.scalars(select(ModelVersion.label).where(
            ModelVersion.model_id == self.local.id)))
        for dup in self.remote.duplicates:
            self.report.skipped.append(f"{self.mlflow_name} v{dup.number}: label "
                                       f"{dup.label!r} is already used by another version")
        for alias, number in self.remote.unlabeled_aliases().items():
            self.report.skipped.append(f"{self.mlflow_name} alias {alias}: version {number} "
                                       f"has no usable label")
        for rv in self.remote.versions:
            if rv.label in known:
                continue
            kind = rv.tags.get(TAG_KIND, VersionKind.FULL)
            base = rv.tags.get(TAG_BASE) if kind == VersionKind.LORA else None
            try:
                with self.session.begin_nested():
                    row = add_version(self.session, self.local, rv.label, kind=kind,
                                      base_version=base, source_uri=rv.source_uri,
                                      **rv.field_values())
            except RegistryError as exc:
                self.report.skipped.append(f"{self.mlflow_name} v{rv.number}: {exc.message}")
                continue
            known.add(rv.label)
            self._local_change("create", "model_version", f"{self.name}:{rv.label}",
                               row_to_dict(row), f"added version {self.name}:{rv.label}")

    # --- Inferplane -> MLflow ----------------------------------------------------------

    def _push_model(self) -> None:
        if self.remote is None:
            self.remote = self.sync.registry.create_model(self.mlflow_name,
                                                          self.local.description)
            self._mlflow_change("create", "mlflow_model", self.mlflow_name,
                                f"created MLflow model {self.mlflow_name}")
        exported = self.remote.by_label()
        versions = self.session.scalars(select(ModelVersion).where(
            ModelVersion.model_id == self.local.id).order_by(ModelVersion.id))
        for version in versions:
            if version.label in exported:
                continue
            source = mlflow_source(version.source_uri, self.name, version.label)
            remote = self.sync.registry.create_version(self.mlflow_name, source,
                                                       self._version_tags(version))
            self.remote.versions.append(remote)
            self._mlflow_change("create", "mlflow_model_version",
                                f"{self.mlflow_name}:{remote.number}",
                                f"exported {self.name}:{version.label} as MLflow version "
                                f"{remote.number}")

    def _version_tags(self, version: ModelVersion) -> dict[str, str]:
        tags = {TAG_LABEL: version.label, TAG_KIND: version.kind}
        if version.source_uri:
            tags[TAG_SOURCE] = version.source_uri
        if version.base_version is not None:
            tags[TAG_BASE] = version.base_version.label
        for name, tag in FIELD_TAGS.items():
            if getattr(version, name):
                tags[tag] = str(getattr(version, name))
        return tags

    # --- aliases -----------------------------------------------------------------------

    def _merge_aliases(self) -> None:
        ours = {a.name: a.version.label for a in self.session.scalars(
            select(Alias).where(Alias.model_id == self.local.id))}
        theirs = self.remote.alias_labels()
        base = load_base(self.session, self.sync.target, self.name)
        for alias in sorted(set(ours) | set(theirs) | set(base)):
            target = resolve_alias(base.get(alias), ours.get(alias), theirs.get(alias))
            if self.sync.pulls and ours.get(alias) != target:
                if self._set_local(alias, target):
                    ours = _with(ours, alias, target)
            if self.sync.pushes and theirs.get(alias) != target:
                if self._set_remote(alias, target):
                    theirs = _with(theirs, alias, target)
            if ours.get(alias) == theirs.get(alias) and base.get(alias) != ours.get(alias):
                save_base(self.session, self.sync.target, self.name, alias, ours.get(alias))

    def _set_local(self, alias: str, label: str | None) -> bool:
        if label is not None and (not LOCAL_NAME.match(alias) or len(alias) > 100):
            self.report.skipped.append(f"alias {self.name}:{alias} not imported: Inferplane "
                                       f"aliases must match {LOCAL_NAME.pattern}")
            return False
        try:
            with self.session.begin_nested():
                if label is None:
                    before = delete_alias(self.session, self.local, alias, self.sync.actor)
                    previous, after = before.version.label, None
                else:
                    _, previous, _ = set_alias(self.session, self.local, alias, label,
                                               self.sync.actor)
                    after = {"alias": alias, "version": label}
        except RegistryError as exc:
            self.report.skipped.append(f"alias {self.name}:{alias}: {exc.message}")
            return False
        before = None if previous is None else {"alias": alias, "version": previous}
        action = "delete_alias" if label is None else "set_alias"
        self._local_change(action, "alias", f"{self.name}:{alias}", after,
                           f"{action} {self.name}:{alias} {previous} -> {label}", before)
        return True

    def _set_remote(self, alias: str, label: str | None) -> bool:
        problem = mlflow_alias_problem(alias)
        if problem:
            self.report.skipped.append(f"alias {self.name}:{alias} not exported: {problem}")
            return False
        if label is None:
            self.sync.registry.delete_alias(self.mlflow_name, alias)
        else:
            remote = self.remote.by_label().get(label)
            if remote is None:
                self.report.skipped.append(f"alias {self.name}:{alias} not exported: version "
                                           f"{label!r} is not in MLflow")
                return False
            self.sync.registry.set_alias(self.mlflow_name, alias, remote.number)
        action = "delete_alias" if label is None else "set_alias"
        self._mlflow_change(action, "mlflow_alias", f"{self.mlflow_name}:{alias}",
                            f"MLflow {action} {self.mlflow_name}:{alias} -> {label}")
        return True

    # --- bookkeeping -------------------------------------------------------------------

    def _local_change(self, action: str, kind: str, resource_id: str, after: dict | None,
                      summary: str, before: dict | None = None) -> None:
        audit(self.session, self.sync.actor, action, kind, resource_id, before=before,
              after=after, message=f"from MLflow {self.sync.target}")
        self.report.inferplane_changes.append(summary)

    def _mlflow_change(self, action: str, kind: str, resource_id: str, summary: str) -> None:
        audit(self.session, self.sync.actor, action, kind, resource_id,
              message=f"to MLflow {self.sync.target}")
        self.report.mlflow_changes.append(summary)


def _with(values: dict[str, str], key: str, value: str | None) -> dict[str, str]:
    """A copy with key set to value, or removed when value is None."""
    updated = {k: v for k, v in values.items() if k != key}
    if value is not None:
        updated[key] = value
    return updated
