"""/admin/v1/mlflow/sync: run an MLflow registry sync on demand (POST) and see how the last
one went (GET). The periodic loop is MlflowSync.run; both share the sync's lock."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from control_plane.admin.common import ADMIN_PREFIX, operator
from registry.mlflow_remote import MlflowUnavailable
from registry.mlflow_sync import MlflowSync


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    direction: Literal["pull", "push", "both"] = "both"


def build_mlflow_router(sync: MlflowSync, snapshot_source=None) -> APIRouter:
    router = APIRouter(prefix=f"{ADMIN_PREFIX}/mlflow", tags=["admin: mlflow"])

    @router.get("/sync")
    def last_sync(_: Principal = Depends(operator)):
        return sync.status()

    @router.post("/sync")
    def sync_now(body: SyncRequest | None = None, _: Principal = Depends(operator)):
        direction = (body or SyncRequest()).direction
        try:
            report = sync.sync_once(direction)
        except MlflowUnavailable as exc:
            raise OpenAIError(503, str(exc), code=ErrorCode.MLFLOW_UNAVAILABLE) from None
        except Exception as exc:
            if not _from_mlflow(exc):
                raise
            raise OpenAIError(502, f"MLflow refused the sync: {exc}",
                              code=ErrorCode.MLFLOW_ERROR) from None
        if report.snapshot_version is not None and snapshot_source is not None:
            snapshot_source.refresh()  # route on the imported aliases now, not at the next poll
        return report.to_dict()

    return router


def _from_mlflow(exc: Exception) -> bool:
    try:
        from mlflow.exceptions import MlflowException
    except ImportError:
        return False
    return isinstance(exc, MlflowException)
