"""The MLflow side of the sync: a paginated, read-whole-model view over MlflowClient's
registry calls, plus the writes the sync needs. MLflow is imported lazily so the gateway and
control plane run without it installed (it is the optional `mlflow` extra).

Inferplane version labels are free-form while MLflow numbers versions itself, so every
exported version carries its label in the `inferplane.label` tag; a version created in MLflow
without that tag is known by its number."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx

TAG_LABEL = "inferplane.label"
TAG_SOURCE = "inferplane.source_uri"
TAG_KIND = "inferplane.kind"
TAG_BASE = "inferplane.base_version"
FIELD_TAGS = {"checksum": "inferplane.checksum", "precision": "inferplane.precision",
              "engine": "inferplane.engine"}
PAGE_SIZE = 200
# MLflow only accepts these alias names; "latest" and vN are reserved (they address versions).
ALIAS_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")
RESERVED_ALIAS = re.compile(r"^(latest|v\d+)$", re.IGNORECASE)
# MLflow refuses local paths as version sources unless they sit inside a run's artifacts.
REMOTE_SOURCE = re.compile(r"^(?!file:)[A-Za-z][A-Za-z0-9+.-]*://")


class MlflowUnavailable(RuntimeError):
    """The tracking server cannot be reached, or the mlflow package is missing."""


def mlflow_alias_problem(alias: str) -> str | None:
    if not ALIAS_PATTERN.match(alias):
        return "MLflow aliases may only contain letters, digits, '_' and '-'"
    if RESERVED_ALIAS.match(alias):
        return "the name is reserved by MLflow"
    return None


def mlflow_source(source_uri: str | None, model_name: str, label: str) -> str:
    """A source MLflow accepts; the real one always travels in the inferplane.source_uri tag."""
    if source_uri and REMOTE_SOURCE.match(source_uri):
        return source_uri
    return f"inferplane://{model_name}/{label}"


@dataclass(frozen=True)
class RemoteVersion:
    number: str
    label: str
    source: str
    tags: dict[str, str]

    @property
    def source_uri(self) -> str:
        return self.tags.get(TAG_SOURCE) or self.source

    def field_values(self) -> dict[str, str]:
        return {name: self.tags[tag] for name, tag in FIELD_TAGS.items() if self.tags.get(tag)}


@dataclass
class RemoteModel:
    name: str
    description: str
    aliases: dict[str, str]  # alias -> version number
    versions: list[RemoteVersion] = field(default_factory=list)
    duplicates: list[RemoteVersion] = field(default_factory=list)  # label already taken
    problem: str | None = None  # why this model cannot be synced

    def by_label(self) -> dict[str, RemoteVersion]:
        return {v.label: v for v in self.versions}

    def alias_labels(self) -> dict[str, str]:
        """alias -> Inferplane label; aliases on versions without a usable label are dropped."""
        label_of = {v.number: v.label for v in self.versions}
        return {a: label_of[n] for a, n in self.aliases.items() if n in label_of}

    def unlabeled_aliases(self) -> dict[str, str]:
        """alias -> version number, for aliases on versions the sync cannot label."""
        numbers = {v.number for v in self.versions}
        return {a: n for a, n in self.aliases.items() if n not in numbers}


def _label_versions(versions: list[Any]) -> tuple[list[RemoteVersion], list[RemoteVersion]]:
    """Tagged labels claim their names first, so an untagged version numbered like an
    exported label ("3") cannot steal it; later claimants are reported as duplicates."""
    ordered = sorted(versions, key=lambda v: (TAG_LABEL not in (v.tags or {}), int(v.version)))
    kept: dict[str, RemoteVersion] = {}
    duplicates = []
    for mv in ordered:
        tags = dict(mv.tags or {})
        remote = RemoteVersion(str(mv.version), tags.get(TAG_LABEL) or str(mv.version),
                               mv.source or "", tags)
        if remote.label in kept:
            duplicates.append(remote)
        else:
            kept[remote.label] = remote
    return sorted(kept.values(), key=lambda v: int(v.number)), duplicates


class MlflowRegistry:
    def __init__(self, tracking_uri: str, health_timeout_s: float = 5.0):
        try:
            from mlflow import MlflowClient
        except ImportError as exc:
            raise MlflowUnavailable(
                "MLflow sync needs the mlflow client: pip install 'inferplane[mlflow]'") from exc
        self.tracking_uri = tracking_uri
        self.health_timeout_s = health_timeout_s
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def check(self) -> None:
        """Fail in seconds when an HTTP server is down: the MLflow client itself retries with
        backoff for minutes before giving up."""
        if not self.tracking_uri.startswith(("http://", "https://")):
            return
        url = self.tracking_uri.rstrip("/") + "/health"
        try:
            httpx.get(url, timeout=self.health_timeout_s).raise_for_status()
        except httpx.HTTPError as exc:
            raise MlflowUnavailable(f"MLflow tracking server {self.tracking_uri} is not "
                                    f"reachable: {exc}") from None

    def list_models(self, prefix: str = "") -> dict[str, RemoteModel]:
        """Every registered model whose name starts with prefix, with versions and aliases."""
        query = f"name LIKE {_literal(prefix + '%')}" if prefix else None
        models = {}
        for rm in self._pages(self.client.search_registered_models, filter_string=query):
            if not rm.name.startswith(prefix):  # LIKE treats '_' and '%' in prefix as wildcards
                continue
            model = RemoteModel(rm.name, rm.description or "", dict(rm.aliases or {}))
            try:
                model.versions, model.duplicates = _label_versions(self._versions(rm.name))
            except ValueError as exc:
                model.problem = str(exc)
            models[rm.name] = model
        return models

    def _versions(self, name: str) -> list[Any]:
        found = self._pages(self.client.search_model_versions,
                            filter_string=f"name = {_literal(name)}")
        return [mv for mv in found if mv.name == name and mv.status == "READY"]

    @staticmethod
    def _pages(search, **kwargs) -> list[Any]:
        items, token = [], None
        while True:
            page = search(max_results=PAGE_SIZE, page_token=token, **kwargs)
            items.extend(page)
            token = page.token
            if not token:
                return items

    def create_model(self, name: str, description: str) -> RemoteModel:
        self.client.create_registered_model(name, description=description or None)
        return RemoteModel(name, description, {})

    def create_version(self, name: str, source: str, tags: dict[str, str]) -> RemoteVersion:
        # A source-only registration is READY at once; waiting would only add polling.
        mv = self.client.create_model_version(name, source, tags=tags, await_creation_for=0)
        return RemoteVersion(str(mv.version), tags[TAG_LABEL], mv.source, dict(tags))

    def set_alias(self, name: str, alias: str, number: str) -> None:
        self.client.set_registered_model_alias(name, alias, number)

    def delete_alias(self, name: str, alias: str) -> None:
        self.client.delete_registered_model_alias(name, alias)


def _literal(value: str) -> str:
    """A string literal for an MLflow filter; it has no escapes, so pick the free quote."""
    for quote in ("'", '"'):
        if quote not in value:
            return f"{quote}{value}{quote}"
    raise ValueError(f"MLflow filters cannot express a name holding both quote kinds: {value!r}")
