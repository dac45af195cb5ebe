"""The CPU kernels' build cache: names follow the source (an edited kernel is rebuilt), the
switch turns every kernel off, and a source that does not compile leaves the torch paths
serving instead of failing the engine."""
import logging

from builtin_engine.kernels import cpu_extension
from builtin_engine.kernels.cpu_extension import load_extension


def test_the_module_name_follows_the_source():
    a = cpu_extension._module_name("k", "int f() { return 1; }")
    b = cpu_extension._module_name("k", "int f() { return 2; }")
    assert a != b and a.startswith("k_")
    assert a == cpu_extension._module_name("k", "int f() { return 1; }")


def test_the_switch_turns_kernels_off(monkeypatch):
    monkeypatch.setenv(cpu_extension.DISABLE_ENV, "0")
    assert load_extension("inferplane_test_switched_off", "int f() { return 0; }", ("f",)) is None


def test_a_source_that_does_not_compile_gives_none(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("INFERPLANE_EXTENSIONS_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger=cpu_extension.__name__):
        module = load_extension("inferplane_test_broken", "this is not C++", ("f",))
    assert module is None
    assert "unavailable" in caplog.text and "using the torch path" in caplog.text
