"""/admin/v1/models: the models clients ask for by name."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.vocabulary import Modality, ModelTask, RoutingStrategy, Tier
from control_plane.admin.common import (MAX_INT, NAME_PATTERN, AdminContext, Body, Name, Page,
                                        PageDep, Patch, PathName, delete_row, image, operator,
                                        paginate, patch_row, with_etag)
from registry.cache_policy import CachePolicy
from registry.dependents import check_model_unused
from registry.errors import InvalidError, NotFoundError
from registry.orm.catalog import Model
from registry.queries import create_model, get_model

ContextLength = Field(None, gt=0, le=MAX_INT)
Price = Field(None, ge=0, le=1e6, description="USD per 1000 tokens")


class ModelCreate(Body):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    description: str = Field("", max_length=10_000)
    context_length: int | None = ContextLength
    routing: RoutingStrategy | None = None   # null: the gateway's configured default
    fallbacks: list[Name] = Field(default_factory=list, max_length=20,
                                  description="existing models tried when this one fails")
    tier: Tier = Tier.HOT
    price_in_per_1k: float = Field(0.0, ge=0, le=1e6)
    price_out_per_1k: float = Field(0.0, ge=0, le=1e6)
    modalities: list[Modality] = Field(default_factory=lambda: ["text"], min_length=1,
                                       max_length=5, description="content types it reads")
    task: ModelTask = Field(ModelTask.CHAT, description="chat, or embedding")
    cache: CachePolicy | None = Field(None, description="response cache; null: not cached")


class ModelPatch(Patch):
    description: str = Field(None, max_length=10_000)
    context_length: int | None = ContextLength
    routing: RoutingStrategy | None = None
    fallbacks: list[Name] = Field(None, max_length=20)
    tier: Tier = None
    price_in_per_1k: float = Price
    price_out_per_1k: float = Price
    modalities: list[Modality] = Field(None, min_length=1, max_length=5)
    task: ModelTask = None
    cache: CachePolicy | None = None


def check_fallbacks(session: Session, name: str, fallbacks: list[str]) -> None:
    if name in fallbacks:
        raise InvalidError(f"model '{name}' cannot fall back to itself", param="fallbacks")
    known = set(session.scalars(select(Model.name).where(Model.name.in_(fallbacks))))
    missing = [f for f in fallbacks if f not in known]
    if missing:
        raise NotFoundError(f"unknown fallback model(s): {', '.join(missing)}",
                            param="fallbacks", code=ErrorCode.MODEL_NOT_FOUND)


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/models", tags=["admin: models"])

    @router.get("")
    def list_models(page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            return paginate(session, select(Model).order_by(Model.name), page, image)

    @router.post("", status_code=201)
    def create(body: ModelCreate, response: Response, who: Principal = Depends(operator)):
        with ctx.change(who, "create", "model") as change:
            check_fallbacks(change.session, body.name, body.fallbacks)
            model = create_model(change.session, **body.model_dump())
            change.resource_id, change.after = model.name, image(model)
        with_etag(response, model)
        return change.after

    @router.get("/{name}")
    def get(name: PathName, response: Response, _: Principal = Depends(operator)):
        with ctx.read() as session:
            model = get_model(session, name)
            with_etag(response, model)
            return image(model, versions=[v.label for v in model.versions],
                         aliases={a.name: a.version.label for a in model.aliases})

    @router.patch("/{name}")
    def update(name: PathName, body: ModelPatch, request: Request, response: Response,
               who: Principal = Depends(operator)):
        def apply(session, model, changes):
            if "fallbacks" in changes:
                check_fallbacks(session, name, changes["fallbacks"])
            for key, value in changes.items():
                setattr(model, key, value)

        return patch_row(ctx, who, "model", name, f"model '{name}'",
                         lambda s: get_model(s, name), body, request, response, apply=apply)

    @router.delete("/{name}", status_code=204)
    def delete(name: PathName, request: Request, who: Principal = Depends(operator)):
        def load(session):
            model = get_model(session, name)
            check_model_unused(session, model)
            return model

        return delete_row(ctx, who, "model", name, f"model '{name}'", load, request)

    return router
