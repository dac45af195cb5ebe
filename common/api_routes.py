"""Every route of an app, as the OpenAPI document and the 405 handler both need them.

    for route in api_routes(app): route.path_format, route.methods, route.dependant
"""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import APIRoute


def api_routes(app: FastAPI) -> list:
    """Every APIRoute of the app, routers included at any depth, with its effective path,
    methods and dependencies (FastAPI ≥ 0.16x includes routers lazily)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI flattens included routers into app.routes
        return [r for r in app.routes if isinstance(r, APIRoute)]
    return [c for c in iter_route_contexts(app.routes) if isinstance(c.original_route, APIRoute)]
