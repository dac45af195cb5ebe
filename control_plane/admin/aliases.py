"""/admin/v1/models/{name}/aliases: movable names for versions ("default", "prod", ...).

PUT is conditional when it carries If-Match (or expected_row_version): two operators moving
the same alias from the same starting point cannot both win; the second gets 409."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import Field
from sqlalchemy import select

from common.auth.principal import Principal
from control_plane.admin.common import (MAX_INT, NAME_PATTERN, AdminContext, Body, Page, PageDep,
                                        PathName, actor_of, expected_row_version, image, operator,
                                        paginate, with_etag)
from registry.dependents import check_alias_unused
from registry.orm.catalog import Alias, AliasHistory
from registry.queries import delete_alias, get_alias, get_model, set_alias

AliasName = Annotated[str, Path(min_length=1, max_length=100)]
NewAlias = Annotated[str, Path(min_length=1, max_length=100, pattern=NAME_PATTERN)]


class AliasPut(Body):
    version: str = Field(min_length=1, max_length=100)
    expected_row_version: int | None = Field(
        None, ge=0, le=MAX_INT, description="0 = create only; otherwise the row_version last read")


def render(alias: Alias, model_name: str) -> dict[str, Any]:
    return image(alias, model=model_name, alias=alias.name, version=alias.version.label)


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/models/{name}/aliases", tags=["admin: aliases"])

    @router.get("")
    def list_aliases(name: PathName, page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            model = get_model(session, name)
            stmt = select(Alias).where(Alias.model_id == model.id).order_by(Alias.name)
            return paginate(session, stmt, page, lambda a: render(a, name))

    @router.get("/{alias}")
    def get(name: PathName, alias: AliasName, response: Response, _: Principal = Depends(operator)):
        with ctx.read() as session:
            row = get_alias(session, get_model(session, name), alias)
            with_etag(response, row)
            return render(row, name)

    @router.put("/{alias}", responses={201: {"description": "the alias was created"}})
    def put(name: PathName, alias: NewAlias, body: AliasPut, request: Request,
            response: Response, who: Principal = Depends(operator)):
        expected = expected_row_version(request, body.expected_row_version)
        with ctx.change(who, "set_alias", "alias") as change:
            model = get_model(change.session, name)
            row, previous, created = set_alias(change.session, model, alias, body.version,
                                               actor_of(who), expected)
            change.resource_id = f"{name}:{alias}"
            change.before = None if created else {"alias": alias, "version": previous}
            change.after = render(row, name)
        response.status_code = 201 if created else 200
        with_etag(response, row)
        return change.after

    @router.delete("/{alias}", status_code=204)
    def delete(name: PathName, alias: AliasName, request: Request,
               who: Principal = Depends(operator)):
        expected = expected_row_version(request)
        with ctx.change(who, "delete_alias", "alias") as change:
            model = get_model(change.session, name)
            row = get_alias(change.session, model, alias)
            check_alias_unused(change.session, model, alias)
            change.resource_id, change.before = f"{name}:{alias}", render(row, name)
            delete_alias(change.session, model, alias, actor_of(who), expected)
        return Response(status_code=204)

    @router.get("/{alias}/history")
    def history(name: PathName, alias: AliasName, page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            get_model(session, name)
            stmt = select(AliasHistory).where(AliasHistory.model_name == name,
                                              AliasHistory.alias == alias) \
                .order_by(AliasHistory.id.desc())
            return paginate(session, stmt, page, image)

    return router

