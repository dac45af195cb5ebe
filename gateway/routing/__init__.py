"""Backend selection: filters, strategies and the load/prefix state they read."""
from gateway.routing.router import Router
from gateway.routing.strategies import RouteContext

__all__ = ["Router", "RouteContext"]
