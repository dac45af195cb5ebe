"""Cold starts from the request path: hold a request while the control plane starts an engine.

A cold model has no engine until its first request. The gateway asks a ColdStarter for a ready
backend and waits (within a cold-start budget) until its RoutingSnapshot shows one; only then
does the request go on to admission and routing. Two implementations, one interface:

- `InProcessColdStarter(tiers, snapshot_source)` (control_plane/tiers/cold_starter.py): `inferplane up` (gateway and control plane in
  one process) calls `TierManager.ensure_started` directly.
- `HttpColdStarter(control_plane_url, api_key, snapshot_source)`: a gateway running apart POSTs
  `/admin/v1/models/{name}/wake` to the control plane (an operator-role key) and batches its
  request counts to `/admin/v1/models/{name}/activity`.

Where the request path calls it (gateway/request_path/proxy.py, `proxy_request`):
1. Right after `resolve_model(...)` has produced `model_view` (and `adapter`), for every request:
   `state.cold_starter.note_request(model_view.name)`. The tier manager's idle timer and the
   warm/cold promotion rate both come from these calls; without them a busy cold engine would
   be stopped after `idle_s`.
2. At the check that raises 503 `no_ready_backend` (no router candidate in any attempt plan),
   before raising: when `state.cold_starter` is set and the model is cold or warm (or the
   request names an adapter no ready backend holds),
   `ok = await state.cold_starter.ensure_backend(model_view.name, budget_s, adapter=adapter)`;
   on True re-read `snapshot = state.snapshot`, re-resolve `model_view` from it and continue to
   admission; on False raise the 503 (`code=ErrorCode.COLD_START_TIMEOUT`, with a Retry-After). Use
   the gateway's cold-start budget setting for `budget_s` (e.g. 60 s; the queue timeout should
   not start counting until this returns).
`ensure_backend` never raises for an unstartable model: it logs why and returns False.

A request for "<model>:<adapter>" that no ready backend holds (the model running) calls
`url = await state.cold_starter.load_adapter(model_view.name, adapter, budget_s)`: the control
plane's AdapterManager loads it (a free slot, else in place of the least recently used adapter
past its minimum residency) and the URL of that engine comes back, so the request goes there
before the snapshot shows the adapter. None: not done within the budget. The control plane's
refusals of the load itself (ADAPTER_REFUSALS: every slot too young, with its Retry-After; the
engine failing the load) are raised as InferplaneErrors for the client.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Protocol

import httpx

from common.error_codes import ErrorCode
from common.errors import InferplaneError
from common.vocabulary import BackendState

log = logging.getLogger("inferplane.coldstart")

POLL_S = 0.05
ADAPTER_REFUSALS = frozenset({ErrorCode.ADAPTER_SLOTS_BUSY, ErrorCode.ADAPTER_LOAD_FAILED,
                              ErrorCode.ADAPTER_NOT_FOUND})


class ColdStarter(Protocol):
    def note_request(self, model_name: str) -> None: ...

    async def ensure_backend(self, model_name: str, budget_s: float,
                             adapter: str | None = None) -> bool: ...

    async def load_adapter(self, model_name: str, adapter: str,
                           budget_s: float) -> str | None: ...


def ready_url(snapshot, model_name: str, adapter: str | None = None,
              url: str | None = None) -> str | None:
    """The URL of a ready backend of the model (holding `adapter`, at `url`), else None."""
    model = snapshot.models.get(model_name)
    if model is None:
        return None
    return next((b.url for b in model.backends if b.state == BackendState.READY
                 and (adapter is None or adapter in b.adapters) and url in (None, b.url)), None)


def has_ready_backend(snapshot, model_name: str, adapter: str | None = None) -> bool:
    return ready_url(snapshot, model_name, adapter) is not None


async def wait_for_backend(snapshot_source, model_name: str, adapter: str | None,
                           deadline: float, url: str | None = None) -> str | None:
    """Until the snapshot shows a ready backend (holding `adapter`, at `url`): its URL, or None
    at the deadline."""
    while True:
        found = ready_url(snapshot_source.current, model_name, adapter, url)
        if found is not None or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))


async def wait_for_snapshot(snapshot_source, model_name: str, adapter: str | None,
                            deadline: float) -> bool:
    """Until the snapshot shows a ready backend (holding `adapter`), or the deadline."""
    return await wait_for_backend(snapshot_source, model_name, adapter, deadline) is not None


async def engine_listed(snapshot_source, model_name: str, url: str | None,
                         adapter: str, deadline: float) -> str | None:
    """The loaded engine's URL once the snapshot lists it ready (at once for a running engine:
    its adapters may show later, the request need not wait for that). Without a URL (the load
    still running), the first ready engine the snapshot shows holding the adapter."""
    if url is None:
        return await wait_for_backend(snapshot_source, model_name, adapter, deadline)
    return await wait_for_backend(snapshot_source, model_name, None, deadline, url=url)


class HttpColdStarter:
    def __init__(self, control_plane_url: str, api_key: str, snapshot_source,
                 client: httpx.AsyncClient | None = None, flush_interval_s: float = 5.0):
        self.base = control_plane_url.rstrip("/") + "/admin/v1/models"
        self.snapshots, self.flush_interval_s = snapshot_source, flush_interval_s
        self._headers = {"authorization": f"Bearer {api_key}"}
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(70.0, connect=5.0))
        self._counts: Counter[str] = Counter()

    def note_request(self, model_name: str) -> None:
        self._counts[model_name] += 1

    async def ensure_backend(self, model_name: str, budget_s: float,
                             adapter: str | None = None) -> bool:
        deadline = time.monotonic() + budget_s
        if has_ready_backend(self.snapshots.current, model_name, adapter):
            return True
        response = await self._wake(model_name, adapter, budget_s)
        if response is None or response.status_code not in (200, 202):
            return False
        return await wait_for_snapshot(self.snapshots, model_name, adapter, deadline)

    async def load_adapter(self, model_name: str, adapter: str, budget_s: float) -> str | None:
        deadline = time.monotonic() + budget_s
        response = await self._wake(model_name, adapter, budget_s)
        if response is None:
            return None
        if response.status_code not in (200, 202):
            raise_refusal(response)
            return None
        url = response.json().get("url") if response.status_code == 200 else None
        return await engine_listed(self.snapshots, model_name, url, adapter, deadline)

    async def _wake(self, model_name: str, adapter: str | None,
                    budget_s: float) -> httpx.Response | None:
        """POST the wake; None (logged) when the control plane cannot be reached."""
        body = {"wait_s": max(0.0, min(budget_s, 60.0))}
        if adapter is not None:
            body["adapter"] = adapter
        try:
            response = await self._client.post(f"{self.base}/{model_name}/wake", json=body,
                                                headers=self._headers,
                                                timeout=body["wait_s"] + 10.0)
        except httpx.HTTPError as exc:
            log.warning("wake of %s failed: control plane unreachable: %s", model_name, exc)
            return None
        if response.status_code not in (200, 202):
            log.warning("wake of %s refused (%d): %s", model_name, response.status_code,
                        response.text[:300])
        return response

    async def flush(self) -> None:
        """Send the request counts gathered since the last flush (lost ones are re-counted
        next time only if the POST failed before the control plane took them)."""
        counts, self._counts = self._counts, Counter()
        for name, n in counts.items():
            try:
                response = await self._client.post(f"{self.base}/{name}/activity",
                                                   json={"requests": n}, headers=self._headers)
                if response.status_code >= 500:
                    self._counts[name] += n
            except httpx.HTTPError:
                self._counts[name] += n

    async def run(self) -> None:
        """Flush activity every interval until cancelled."""
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()

    async def aclose(self) -> None:
        await self._client.aclose()


def raise_refusal(response: httpx.Response) -> None:
    """The control plane's refusal of an adapter load, raised again for the client (with its
    Retry-After); any other refusal returns (the caller answers it as not started)."""
    try:
        error = response.json().get("error") or {}
    except ValueError:
        return
    if isinstance(error, dict) and error.get("code") in ADAPTER_REFUSALS:
        retry = response.headers.get("retry-after")
        raise InferplaneError(str(error.get("message") or "adapter load refused"),
                              status=response.status_code, code=error["code"],
                              headers={"retry-after": retry} if retry else None)


__all__ = ["ADAPTER_REFUSALS", "ColdStarter", "HttpColdStarter", "InProcessColdStarter",
           "has_ready_backend", "ready_url", "wait_for_backend", "wait_for_snapshot"]
