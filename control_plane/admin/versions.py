"""/admin/v1/models/{name}/versions: the artefacts a model name can be served from."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import AfterValidator, Field
from sqlalchemy import select

from common.auth.principal import Principal
from common.vocabulary import VersionKind, VersionStatus
from control_plane.admin.common import (NAME_PATTERN, AdminContext, Body, Page, PageDep, Patch,
                                        PathName, delete_row, image, operator, paginate, patch_row,
                                        with_etag)
from registry.dependents import check_version_unused
from registry.json_values import check_storable
from registry.orm.catalog import ModelVersion
from registry.queries import add_version, get_model, get_version

# Checked before saving: a value no reader can serialise would make the row, and every audit
# page showing it, unreadable.
EngineArgs = Annotated[dict[str, Any], AfterValidator(lambda v: check_storable(v, "engine_args")),
                       Field(description="engine flags, e.g. {\"max_model_len\": 4096}; "
                             "JSON with 64-bit integers, at most 32 levels deep")]
VersionLabel = Field(None, min_length=1, max_length=100)


class VersionCreate(Body):
    version: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN)
    kind: VersionKind = VersionKind.FULL
    base_version: str | None = VersionLabel
    source_uri: str | None = Field(None, max_length=2000)
    engine: str | None = Field(None, max_length=50)
    engine_args: EngineArgs = Field(default_factory=dict)
    precision: str | None = Field(None, max_length=20)
    checksum: str | None = Field(None, max_length=128)
    status: VersionStatus = VersionStatus.REGISTERED


class VersionPatch(Patch):
    source_uri: str | None = Field(None, max_length=2000)
    engine: str | None = Field(None, max_length=50)
    engine_args: EngineArgs = None
    precision: str | None = Field(None, max_length=20)
    checksum: str | None = Field(None, max_length=128)
    status: VersionStatus = None


def render(version: ModelVersion) -> dict[str, Any]:
    base = version.base_version.label if version.base_version else None
    return image(version, version=version.label, base_version=base)


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/models/{name}/versions", tags=["admin: versions"])

    @router.get("")
    def list_versions(name: PathName, page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            model = get_model(session, name)
            stmt = select(ModelVersion).where(ModelVersion.model_id == model.id) \
                .order_by(ModelVersion.id)
            return paginate(session, stmt, page, render)

    @router.post("", status_code=201)
    def create(name: PathName, body: VersionCreate, response: Response,
               who: Principal = Depends(operator)):
        with ctx.change(who, "create", "model_version") as change:
            model = get_model(change.session, name)
            fields = body.model_dump(exclude={"version", "kind", "base_version"})
            version = add_version(change.session, model, body.version, kind=body.kind,
                                  base_version=body.base_version, **fields)
            change.resource_id, change.after = f"{name}/{body.version}", render(version)
        with_etag(response, version)
        return change.after

    @router.get("/{version}")
    def get(name: PathName, version: PathName, response: Response, _: Principal = Depends(operator)):
        with ctx.read() as session:
            row = get_version(session, get_model(session, name), version)
            with_etag(response, row)
            return render(row)

    @router.patch("/{version}")
    def update(name: PathName, version: PathName, body: VersionPatch, request: Request,
               response: Response, who: Principal = Depends(operator)):
        return patch_row(ctx, who, "model_version", f"{name}/{version}",
                         f"version '{version}'",
                         lambda s: get_version(s, get_model(s, name), version), body, request,
                         response, render=render)

    @router.delete("/{version}", status_code=204)
    def delete(name: PathName, version: PathName, request: Request,
               who: Principal = Depends(operator)):
        def load(session):
            model = get_model(session, name)
            row = get_version(session, model, version)
            check_version_unused(session, model, row)
            return row

        return delete_row(ctx, who, "model_version", f"{name}/{version}", f"version '{version}'",
                          load, request, render=render)

    return router
