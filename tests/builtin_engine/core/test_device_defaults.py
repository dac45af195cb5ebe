"""The default dtype follows the device: bfloat16 only where the CPU computes it natively."""
from __future__ import annotations

import pytest

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.device_defaults import (THREADS_ENV, cpu_flags, cpu_has_native_bf16,
                                                 resolve_dtype, resolve_threads)


def test_bf16_only_with_native_dot_products():
    assert resolve_dtype("auto", "cpu", frozenset({"avx2", "avx512_bf16"})) == (
        "bfloat16", "auto: CPU has avx512_bf16")
    assert resolve_dtype("auto", "cpu", frozenset({"amx_bf16"}))[0] == "bfloat16"
    dtype, why = resolve_dtype("auto", "cpu", frozenset({"avx2", "avx512f"}))
    assert dtype == "float32" and "lacks" in why
    assert resolve_dtype("auto", "cuda:0", frozenset({"avx512_bf16"}))[0] == "float32"
    assert resolve_dtype("float16", "cpu") == ("float16", "requested")


def test_config_resolves_auto_for_this_machine():
    config = EngineConfig()
    expected = "bfloat16" if cpu_has_native_bf16(cpu_flags()) else "float32"
    assert config.dtype == expected
    assert config.dtype_reason.startswith("auto:")
    assert EngineConfig(dtype="float32").dtype_reason == "requested"


def test_serve_defaults_to_auto():
    import argparse

    from builtin_engine.cli import add_serve_arguments, config_from_args
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    config = config_from_args(parser.parse_args([]))
    assert config.dtype in ("float32", "bfloat16") and config.dtype_reason.startswith("auto:")
    config = config_from_args(parser.parse_args(["--dtype", "float32", "--speculative-ngram",
                                                 "3", "--num-speculative-tokens", "2"]))
    assert (config.dtype, config.speculative_ngram, config.num_speculative_tokens) == (
        "float32", 3, 2)


@pytest.mark.parametrize("bad", [dict(quantization="int4"), dict(speculative_ngram=-1),
                                 dict(num_speculative_tokens=0)])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValueError):
        EngineConfig(**bad)


def test_threads_one_per_core_unless_overridden():
    assert resolve_threads("cpu", "", cores=2) == (2, "auto: 2 cores")
    assert resolve_threads("cpu", "1", cores=2) == (1, f"{THREADS_ENV}=1")
    assert resolve_threads("cuda:0", "")[0] is None
    for bad in ("0", "two"):
        with pytest.raises(ValueError, match=THREADS_ENV):
            resolve_threads("cpu", bad)
