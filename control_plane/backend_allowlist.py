"""Where backends may live: `backends.allowed_networks` (CIDRs and host names).

The control plane sends requests to every registered backend URL (health probes, metrics,
adapter loads), so whoever may register a backend could otherwise make it call anything it can
reach: cloud metadata services, link-local addresses, internal hosts. A URL is allowed when

- its scheme is http or https and it names a host;
- no address the host resolves to is link-local (169.254.0.0/16, fe80::/10) or a metadata
  service (169.254.169.254, fd00:ec2::254, metadata.google.internal): refused always, even
  with no allowlist configured;
- with an allowlist, the host is a listed name or every address it resolves to lies in a
  listed network (a name is resolved and its addresses checked, so a DNS name pointing at a
  refused address is refused too).

    allowlist = BackendAllowlist.from_networks(["10.0.0.0/8", "vllm.internal"])
    allowlist.check("http://10.0.0.5:8000/v1")      # None, or InvalidError (a 400)
    target = allowlist.pin("http://vllm.internal:8000/v1")  # checked address to connect to

`pin` is what probes use: for plain http the URL's host is replaced by the address that was
checked (the name goes in the Host header), so a name cannot resolve to something else between
the check and the connection. Over https the name stays (the certificate is checked against
it, and a metadata service speaks no TLS).
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from common.error_codes import ErrorCode
from registry.errors import InvalidError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALWAYS_REFUSED_NETWORKS: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"))
ALWAYS_REFUSED_NAMES = frozenset({"metadata.google.internal", "metadata", "metadata.goog"})


@dataclass(frozen=True)
class Target:
    url: str                 # the URL to connect to
    host_header: str | None  # the original host[:port] when `url` holds a pinned address


def _normalise(address: Address) -> Address:
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:169.254.169.254 is 169.254.169.254
    return mapped or address


def _refused(address: Address) -> bool:
    return any(address in net for net in ALWAYS_REFUSED_NETWORKS if net.version == address.version)


class BackendAllowlist:
    def __init__(self, networks: tuple[Network, ...], names: frozenset[str], configured: bool):
        self.networks, self.names, self.configured = networks, names, configured

    @classmethod
    def from_networks(cls, networks: list[str] | None) -> BackendAllowlist:
        """From CIDRs ("10.0.0.0/8", "::1/128", a bare address) and host names; None or []:
        anywhere except link-local and metadata addresses."""
        nets, names = [], set()
        for entry in networks or ():
            try:
                nets.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                names.add(entry.strip().lower().rstrip("."))
        return cls(tuple(nets), frozenset(names), bool(networks))

    def check(self, url: str) -> None:
        """None when `url` may be called; InvalidError saying why not otherwise."""
        self.pin(url)

    def pin(self, url: str) -> Target:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
        if parts.scheme not in ("http", "https") or not host:
            raise InvalidError(f"backend URL {url!r} must be http(s)://host[:port]/...",
                               param="url", code=ErrorCode.BACKEND_NOT_ALLOWED)
        if host in ALWAYS_REFUSED_NAMES:
            raise InvalidError(f"backend host {host} is a cloud metadata service",
                               param="url", code=ErrorCode.BACKEND_NOT_ALLOWED)
        addresses = self._resolve(host, parts.port, url)
        for address in addresses:
            if _refused(address):
                raise InvalidError(f"backend host {host} resolves to {address}, a link-local or "
                                   "metadata address", param="url", code=ErrorCode.BACKEND_NOT_ALLOWED)
        if self.configured and host not in self.names:
            outside = [a for a in addresses if not self._listed(a)]
            if outside or not addresses:
                raise InvalidError(
                    f"backend host {host} ({outside[0] if outside else 'unresolved'}) is not in "
                    "backends.allowed_networks", param="url", code=ErrorCode.BACKEND_NOT_ALLOWED)
        return self._target(parts, addresses)

    def _listed(self, address: Address) -> bool:
        return any(address in net for net in self.networks if net.version == address.version)

    def _resolve(self, host: str, port: int | None, url: str) -> list[Address]:
        try:
            return [_normalise(ipaddress.ip_address(host))]
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, port or 80, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            if self.configured and host not in self.names:
                raise InvalidError(f"backend host {host} does not resolve, so it cannot be "
                                   "checked against backends.allowed_networks", param="url",
                                   code=ErrorCode.BACKEND_NOT_ALLOWED) from None
            return []  # without an allowlist an unresolvable name reaches nothing anyway
        return [_normalise(ipaddress.ip_address(info[4][0].split("%")[0])) for info in infos]

    @staticmethod
    def _target(parts, addresses: list[Address]) -> Target:
        if parts.scheme != "http" or not addresses:
            return Target(urlunsplit(parts), None)
        address = addresses[0]
        host = f"[{address}]" if address.version == 6 else str(address)
        netloc = host + (f":{parts.port}" if parts.port else "")
        return Target(urlunsplit(parts._replace(netloc=netloc)), parts.netloc.rsplit("@", 1)[-1])


def allowlist_of(app) -> BackendAllowlist:
    """The allowlist a control plane app was started with (the default one if none)."""
    return getattr(app.state, "backend_allowlist", None) or DEFAULT


DEFAULT = BackendAllowlist.from_networks(None)
