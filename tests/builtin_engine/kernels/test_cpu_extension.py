"""The CPU kernels' build cache: names follow the sources and the headers beside them (an
edited kernel is rebuilt), the switch turns every kernel off, and a source that does not
compile leaves the torch paths serving instead of failing the engine."""
import logging

from builtin_engine.kernels import cpu_extension
from builtin_engine.kernels.cpu_extension import kernel_sources, load_extension


def _source(tmp_path, name: str, text: str) -> tuple[str, ...]:
    path = tmp_path / name
    path.write_text(text)
    return (str(path),)


def test_the_module_name_follows_the_source(tmp_path):
    one = _source(tmp_path, "one.cpp", "int f() { return 1; }")
    two = _source(tmp_path, "two.cpp", "int f() { return 2; }")
    a = cpu_extension._module_name("k", one)
    b = cpu_extension._module_name("k", two)
    assert a != b and a.startswith("k_")
    assert a == cpu_extension._module_name("k", one)
    (tmp_path / "shared.h").write_text("#pragma once\n")  # a header beside it is an input too
    assert cpu_extension._module_name("k", one) != a


def test_the_kernels_sources_ship_with_the_package():
    for name in ("cpu_activation.cpp", "cpu_decode_attention.cpp", "cpu_prefill_attention.cpp",
                 "cpu_prefill_attention_bf16.cpp", "avx512_helpers.h", "prompt_runs.h"):
        (path,) = kernel_sources(name)
        assert cpu_extension.CSRC.joinpath(name).is_file(), path


def test_the_switch_turns_kernels_off(tmp_path, monkeypatch):
    monkeypatch.setenv(cpu_extension.DISABLE_ENV, "0")
    sources = _source(tmp_path, "off.cpp", "int f() { return 0; }")
    assert load_extension("inferplane_test_switched_off", sources) is None


def test_a_source_that_does_not_compile_gives_none(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("INFERPLANE_EXTENSIONS_DIR", str(tmp_path / "build"))
    sources = _source(tmp_path, "broken.cpp", "this is not C++")
    with caplog.at_level(logging.WARNING, logger=cpu_extension.__name__):
        module = load_extension("inferplane_test_broken", sources)
    assert module is None
    assert "unavailable" in caplog.text and "using the torch path" in caplog.text


def _ops() -> dict[str, str]:
    """Each op the kernels define in C++ -> the dispatch key its C++ kernel is under (loading
    each extension defines its ops)."""
    from builtin_engine.kernels.cpu_activation import cpu_silu_and_mul_available
    from builtin_engine.kernels.cpu_decode_attention import cpu_decode_attention_available
    from builtin_engine.kernels.cpu_prefill_attention import cpu_prefill_attention_available
    from builtin_engine.kernels.step_ops import define_step_ops
    assert cpu_decode_attention_available() and cpu_prefill_attention_available()
    assert define_step_ops() == "C++"
    cpu_silu_and_mul_available()  # built on every CPU; it serves only with AVX512-BF16
    return {"cpu_decode_attention": "CPU", "cpu_prefill_attention": "CPU",
            "cpu_silu_and_mul": "CPU", "store_kv": "CompositeExplicitAutograd[alias]",
            "packed_linear": "CompositeExplicitAutograd[alias]"}


def test_the_ops_are_defined_and_implemented_in_cpp():
    """Schema and kernel registered from the C++ (TORCH_LIBRARY), so a call goes dispatcher ->
    C++: no Python kernel under any key but the fake (Meta) one."""
    import torch
    for name, key in _ops().items():
        dump = torch._C._dispatch_dump(f"inferplane::{name}").splitlines()
        lines = {line.split(":")[0]: line for line in dump}
        assert "csrc/" in lines["debug"] and ".cpp" in lines["debug"], dump  # the schema
        assert "csrc/" in lines[key] and "unboxed" in lines[key], dump
        python = [line for line in dump if ".py:" in line and not line.startswith("Meta:")]
        assert not python, python
        if key == "CPU":
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"inferplane::{name}", "CPU")
