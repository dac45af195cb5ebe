"""The web console: a static single-page app under /console that talks to the admin REST API
and the OpenAI API with the signed-in key (kept in the browser tab's sessionStorage).

    mount_console(app)   # /console → the app; /console/static/* its files, vendored libraries

The libraries (Preact + htm, uPlot) are committed built files under console/vendor, so the
console works offline with no build step. Every console response carries a strict
Content-Security-Policy: scripts, styles and API calls from this origin only, nothing inline.
"""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "console"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Cache-Control": "no-cache"}


class ConsoleFiles(StaticFiles):
    """Static files with the console's security headers on every response."""

    async def get_response(self, path: str, scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response


def mount_console(app: FastAPI) -> None:
    app.mount("/console/static", ConsoleFiles(directory=STATIC), name="console-static")

    @app.get("/console", include_in_schema=False)
    @app.get("/console/", include_in_schema=False)
    async def console_index():
        # The page names its files by absolute /console/static/ paths, so both URLs work.
        return FileResponse(STATIC / "index.html", headers=HEADERS)
