"""/admin/v1/guardrails: guardrail policies (PII, banned terms, regular expressions, prompt
size, moderation hook, body logging) and the models and keys that use them. Operators read,
admins write; every write is audited and reaches the gateways through the snapshot.

    GET    /admin/v1/guardrails/policies
    POST   /admin/v1/guardrails/policies          {"name": "strict", "spec": {"pii": {...}}}
    GET    /admin/v1/guardrails/policies/{name}
    PATCH  /admin/v1/guardrails/policies/{name}   {"spec": {...}}   (If-Match: row version)
    DELETE /admin/v1/guardrails/policies/{name}   (its bindings go with it)
    GET    /admin/v1/guardrails/bindings
    PUT    /admin/v1/guardrails/bindings          {"policy": "strict", "model": "smollm2"}
    DELETE /admin/v1/guardrails/bindings/{id}
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from common.auth.principal import Principal
from common.guardrail_spec import POLICY_NAME, PolicySpec
from control_plane.admin.common import (MAX_INT, AdminContext, Body, Name, Page, PageDep,
                                        Patch, PathName, RowId, admin, delete_row, image,
                                        operator, paginate, patch_row, with_etag)
from registry.errors import ConflictError, InvalidError, NotFoundError
from registry.guardrails import bind_policy
from registry.orm.access import ApiKey
from registry.orm.guardrails import GuardrailBinding, GuardrailPolicy

POLICY = "guardrail_policy"
BINDING = "guardrail_binding"


class PolicyCreate(Body):
    name: str = Field(min_length=1, max_length=200, pattern=POLICY_NAME)
    spec: PolicySpec = Field(default_factory=PolicySpec)


class PolicyPatch(Patch):
    spec: PolicySpec = None   # type: ignore[assignment]  (sent: replaces the whole spec)


class BindingPut(Body):
    policy: Name
    model: Name | None = None
    key_id: int | None = Field(None, ge=1, le=MAX_INT)

    @model_validator(mode="after")
    def _one_target(self) -> "BindingPut":
        if (self.model is None) == (self.key_id is None):
            raise ValueError("give exactly one of model and key_id")
        return self


HIDDEN = "***"   # a moderation api_key as answers and audit records show it


def _public(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec without its secret: operators read policies and the audit log."""
    moderation = spec.get("moderation")
    if isinstance(moderation, dict) and moderation.get("api_key"):
        spec = {**spec, "moderation": {**moderation, "api_key": HIDDEN}}
    return spec


def _policy_image(policy: GuardrailPolicy, bindings: bool = True) -> dict[str, Any]:
    extra = {"models": sorted(b.model for b in policy.bindings if b.model),
             "key_ids": sorted(b.key_id for b in policy.bindings if b.key_id)} \
        if bindings else {"models": [], "key_ids": []}
    data = image(policy, **extra)
    data["spec"] = _public(policy.spec)
    return data


def _load_policy(session, name: str) -> GuardrailPolicy:
    policy = session.scalar(select(GuardrailPolicy).where(GuardrailPolicy.name == name)
                            .options(selectinload(GuardrailPolicy.bindings)))
    if policy is None:
        raise NotFoundError(f"guardrail policy '{name}' does not exist", param="name")
    return policy


def _binding_image(binding: GuardrailBinding) -> dict[str, Any]:
    return image(binding, policy=binding.policy.name)


def _set_spec(_session, row: GuardrailPolicy, changes: dict[str, Any]) -> None:
    if "spec" not in changes:
        return
    spec = PolicySpec.model_validate(changes["spec"]).model_dump(mode="json")
    moderation, old = spec.get("moderation"), (row.spec or {}).get("moderation") or {}
    if moderation and moderation.get("api_key") == HIDDEN:   # sent back as it was shown
        moderation["api_key"] = old.get("api_key")
    row.spec = spec


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/guardrails", tags=["admin: guardrails"])

    @router.get("/policies", responses={403: {"description": "needs the operator role"}})
    def list_policies(page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            stmt = select(GuardrailPolicy).order_by(GuardrailPolicy.name).options(
                selectinload(GuardrailPolicy.bindings))
            return paginate(session, stmt, page, _policy_image)

    @router.post("/policies", status_code=201,
                 responses={403: {"description": "needs the admin role"}})
    def create_policy(body: PolicyCreate, response: Response, who: Principal = Depends(admin)):
        with ctx.change(who, "create", POLICY) as change:
            if change.session.scalar(select(GuardrailPolicy.id).where(
                    GuardrailPolicy.name == body.name)) is not None:
                raise ConflictError(f"guardrail policy '{body.name}' already exists",
                                    param="name")
            policy = GuardrailPolicy(name=body.name, spec=body.spec.model_dump(mode="json"))
            change.session.add(policy)
            change.session.flush()
            change.resource_id, change.after = body.name, _policy_image(policy, bindings=False)
        with_etag(response, policy)
        return change.after

    @router.get("/policies/{name}")
    def get_policy(name: PathName, response: Response, _: Principal = Depends(operator)):
        with ctx.read() as session:
            policy = _load_policy(session, name)
            with_etag(response, policy)
            return _policy_image(policy)

    @router.patch("/policies/{name}", responses={403: {"description": "needs the admin role"}})
    def patch_policy(name: PathName, body: PolicyPatch, request: Request, response: Response,
                     who: Principal = Depends(admin)):
        return patch_row(ctx, who, POLICY, name, f"guardrail policy '{name}'",
                         lambda s: _load_policy(s, name), body, request, response,
                         render=_policy_image, apply=_set_spec)

    @router.delete("/policies/{name}", status_code=204,
                   responses={403: {"description": "needs the admin role"}})
    def delete_policy(name: PathName, request: Request, who: Principal = Depends(admin)):
        return delete_row(ctx, who, POLICY, name, f"guardrail policy '{name}'",
                          lambda s: _load_policy(s, name), request, render=_policy_image)

    @router.get("/bindings")
    def list_bindings(page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            stmt = select(GuardrailBinding).order_by(GuardrailBinding.id).options(
                selectinload(GuardrailBinding.policy))
            return paginate(session, stmt, page, _binding_image)

    @router.put("/bindings", responses={403: {"description": "needs the admin role"}})
    def put_binding(body: BindingPut, who: Principal = Depends(admin)):
        """Bind a model or a key to a policy (replacing the policy it had)."""
        with ctx.change(who, "bind", BINDING) as change:
            policy = _load_policy(change.session, body.policy)
            if body.key_id is not None and change.session.get(ApiKey, body.key_id) is None:
                raise InvalidError(f"API key {body.key_id} does not exist", param="key_id")
            binding = bind_policy(change.session, policy, model=body.model, key_id=body.key_id)
            change.session.refresh(binding)
            change.resource_id = body.model or f"key:{body.key_id}"
            change.after = _binding_image(binding)
        return change.after

    @router.delete("/bindings/{binding_id}", status_code=204,
                   responses={403: {"description": "needs the admin role"}})
    def delete_binding(binding_id: RowId, who: Principal = Depends(admin)):
        with ctx.change(who, "unbind", BINDING) as change:
            binding = change.session.get(GuardrailBinding, binding_id)
            if binding is None:
                raise NotFoundError(f"guardrail binding {binding_id} does not exist",
                                    param="binding_id")
            change.resource_id = binding.model or f"key:{binding.key_id}"
            change.before = _binding_image(binding)
            change.session.delete(binding)
        return Response(status_code=204)

    return router
