"""The web console: static files under /console that talk to the admin REST API."""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "console"


def mount_console(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")

    @app.get("/console", include_in_schema=False)
    @app.get("/console/", include_in_schema=False)
    async def console_index():
        return RedirectResponse("/console/static/index.html")
