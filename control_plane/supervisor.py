"""Engine processes (builtin or vLLM): start, relay their output, wait until ready, restart, stop.

    spec = EngineSpec(name="m", model="/models/m-hf", port=8201, engine="vllm",
                      executable="/opt/vllm/bin/vllm", args={"max_loras": 1, "enable_lora": True},
                      env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    proc = await EngineSupervisor().start(spec)      # returns once /health (and /v1/models) answer

Children get PR_SET_PDEATHSIG so they die with the control plane even if it is killed hard:
Ctrl-C or a crash never leaves an orphan engine holding a port and memory. Each engine runs in a
process group of its own and is stopped as a group: vLLM's engine core is a grandchild that the
death signal does not reach. Each engine gets its own API key (engine_adapter.engine_keys)
through its environment (ENGINE_KEY_ENVS: the builtin engine's variable, vLLM's VLLM_API_KEY),
never its command line, so the key shows in no process listing and in no stored command.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import httpx

from builtin_engine.serving.api_key import API_KEY_ENV
from common.vocabulary import BackendState, EngineKind
from control_plane.settings import VLLM_EXECUTABLE
from engine_adapter import engine_keys

log = logging.getLogger("inferplane.supervisor")

MANAGED_ENGINES = (EngineKind.BUILTIN, EngineKind.VLLM)  # the kinds EngineSpec can launch
# Where each launched kind reads its API key from (vLLM: the same as its --api-key flag).
ENGINE_KEY_ENVS = {EngineKind.BUILTIN: API_KEY_ENV, EngineKind.VLLM: "VLLM_API_KEY"}


def _own_group_and_die_with_parent() -> None:
    """In the child before exec: a process group of its own (stopped as one), and SIGTERM when
    the control plane dies. Here rather than process_group=0, which uvloop refuses."""
    os.setpgid(0, 0)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port(host: str = "127.0.0.1", preferred: int | None = None) -> int:
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


@dataclass
class EngineSpec:
    name: str  # served model name
    model: str  # builtin: model reference; vllm: HF directory or repository id
    port: int
    host: str = "127.0.0.1"
    args: dict = field(default_factory=dict)  # extra CLI flags, e.g. {"max_num_seqs": 32}
    engine: str = EngineKind.BUILTIN  # one of MANAGED_ENGINES
    executable: str | None = None  # vllm: the `vllm` CLI to run (default: `vllm` on PATH)
    env: dict[str, str] = field(default_factory=dict)  # added to the engine's environment

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        where = ["--served-model-name", self.name, "--host", self.host, "--port", str(self.port)]
        if self.engine == EngineKind.VLLM:
            return [self.executable or VLLM_EXECUTABLE, "serve", self.model, *where,
                    *_flags(self.args, join_lists=False)]
        if self.engine != EngineKind.BUILTIN:
            raise ValueError(f"engine kind {self.engine!r} cannot be started; "
                             f"startable: {', '.join(MANAGED_ENGINES)}")
        return [sys.executable, "-m", "builtin_engine", "serve", "--model", self.model, *where,
                *_flags(self.args, join_lists=True)]

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for name in ENGINE_KEY_ENVS.values():
            env.pop(name, None)  # never inherit another engine's key
        key = engine_keys.key_for(self.url)
        if key is not None:   # through the environment: no process listing shows it
            env[ENGINE_KEY_ENVS[self.engine]] = key
        if self.engine != EngineKind.BUILTIN:
            # an interpreter of its own (vLLM's venv) must not import this project's packages
            env.pop("PYTHONPATH", None)
        return {**env, **{k: str(v) for k, v in self.env.items()}}


def _flags(args: dict, join_lists: bool) -> list[str]:
    """CLI flags from {"max_num_seqs": 32, "enforce_eager": True, ...}. Lists are one
    comma-joined value for the builtin engine and separate values for vLLM (its nargs="+"
    flags); dicts are JSON (vLLM's --kv-events-config, --compilation-config)."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):  # e.g. lora_roots: [dir, dir]
            values = [str(v) for v in value]
            out += [flag, ",".join(values)] if join_lists else [flag, *values]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        elif value is not False and value is not None:  # 0 is a value (--seed 0)
            out += [flag, str(value)]
    return out


class EngineProcess:
    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self.proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.spec.command(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_own_group_and_die_with_parent, env=self.spec.environment())
        self._pump = asyncio.create_task(self._relay_output())

    async def _relay_output(self) -> None:
        assert self.proc and self.proc.stdout
        async for line in self.proc.stdout:
            text = line.decode(errors="replace").rstrip()
            print(f"[{self.spec.name}] {text}", file=sys.stderr, flush=True)

    async def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if not self.running:
                    raise RuntimeError(f"engine {self.spec.name} exited with code "
                                       f"{self.proc.returncode if self.proc else '?'}")
                try:
                    if await self._answers(client):
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.25)
        raise TimeoutError(f"engine {self.spec.name} not ready after {timeout_s:.0f}s")

    async def _answers(self, client: httpx.AsyncClient) -> bool:
        """/health is 200; a vLLM must also list the served name in /v1/models: a stale
        server of another model left on the port would answer /health too."""
        if (await client.get(self.spec.url.removesuffix("/v1") + "/health")).status_code != 200:
            return False
        if self.spec.engine != EngineKind.VLLM:
            return True
        models = await client.get(self.spec.url + "/models",   # /v1 asks for the key
                                  headers=engine_keys.headers_for(self.spec.url))
        if models.status_code != 200:
            return False
        return self.spec.name in [card.get("id") for card in models.json().get("data", [])]

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the engine's process group, SIGKILL after `grace_s`; then whatever of
        the group outlived its leader (vLLM's engine core) is killed too."""
        if self.running:
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), grace_s)
            except asyncio.TimeoutError:
                self._signal_group(signal.SIGKILL)
                await self.proc.wait()
            # the group id stays reserved while any member lives, so this hits only our engine
            self._signal_group(signal.SIGKILL)
        if self._pump:
            self._pump.cancel()

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


StateCallback = Callable[[EngineSpec, str], Awaitable[None] | None]


class EngineSupervisor:
    """Keeps engines alive: restarts one that dies (with backoff) and reports state changes."""

    def __init__(self, on_state: StateCallback | None = None, ready_timeout_s: float = 600.0):
        self.processes: dict[str, EngineProcess] = {}
        self.on_state = on_state
        self.ready_timeout_s = ready_timeout_s
        self._watch: dict[str, asyncio.Task] = {}
        self._stopping = False

    async def _report(self, spec: EngineSpec, state: str) -> None:
        if self.on_state:
            result = self.on_state(spec, state)
            if asyncio.iscoroutine(result):
                await result

    async def start(self, spec: EngineSpec, wait: bool = True) -> EngineProcess:
        proc = EngineProcess(spec)
        self.processes[spec.name + f":{spec.port}"] = proc
        await self._report(spec, BackendState.STARTING)
        await proc.start()
        if wait:
            await self._await_ready(proc)
        self._watch[spec.name + f":{spec.port}"] = asyncio.create_task(self._watchdog(proc))
        return proc

    async def _await_ready(self, proc: EngineProcess) -> None:
        try:
            await proc.wait_ready(self.ready_timeout_s)
        except Exception:
            await self._report(proc.spec, BackendState.DOWN)
            raise
        await self._report(proc.spec, BackendState.READY)

    async def _watchdog(self, proc: EngineProcess) -> None:
        backoff = 1.0
        while not self._stopping:
            await proc.proc.wait()
            if self._stopping:
                return
            log.warning("engine %s exited (code %s); restarting in %.0fs",
                        proc.spec.name, proc.proc.returncode, backoff)
            await self._report(proc.spec, BackendState.DOWN)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 60.0)
            await proc.start()
            try:
                await self._await_ready(proc)
                backoff = 1.0
            except Exception as exc:  # keep trying: the watchdog owns this engine
                log.error("engine %s failed to restart: %s", proc.spec.name, exc)

    async def stop(self, key: str) -> None:
        proc = self.processes.pop(key, None)
        task = self._watch.pop(key, None)
        if task:
            task.cancel()
        if proc:
            await proc.stop()
            await self._report(proc.spec, BackendState.DOWN)

    async def stop_all(self) -> None:
        self._stopping = True
        for task in self._watch.values():
            task.cancel()
        await asyncio.gather(*(p.stop() for p in self.processes.values()), return_exceptions=True)
        self.processes.clear()
