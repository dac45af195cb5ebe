"""get_ops: backend composition, errors, logging, and a decoder layer torch vs triton."""
import logging

import pytest
import torch

from builtin_engine.kernels import KernelOps, get_attention_ops, get_ops
from tests.builtin_engine.kernels.paged_case import make_case


def test_backends_compose_separately():
    ops = get_ops("torch", attention="triton")
    assert isinstance(ops, KernelOps)
    assert ops.elementwise.name == "torch" and ops.attention.name == "triton"
    assert get_ops("triton").attention.name == "triton"
    assert get_attention_ops("torch").name == "torch"


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown kernels backend 'cuda'"):
        get_ops("cuda")
    with pytest.raises(ValueError, match="unknown attention backend"):
        get_ops("torch", attention="flash")


def test_active_backend_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="builtin_engine.kernels"):
        get_ops("triton", attention="torch")
    assert "kernels=triton,attention=torch" in caplog.text


def _layer(ops, case, weight, cache, positions):
    """norm -> rope -> store -> attention -> gated MLP, the calls the Llama model makes."""
    hidden = case.q.flatten(1)
    normed, residual = ops.rms_norm(hidden, weight, 1e-5, torch.ones_like(hidden))
    q = normed.view_as(case.q).clone()
    k = case.key.clone()
    ops.rotary(q, k, positions, cache)
    k_cache, v_cache = case.k_cache.clone(), case.v_cache.clone()
    ops.store_kv(k, case.value, k_cache, v_cache, case.meta.slot_mapping)
    attn = ops.paged_attention(q, k_cache, v_cache, case.meta, 0.25)
    return ops.silu_and_mul(torch.cat([attn.flatten(1), residual], dim=-1)), k_cache


@pytest.mark.parametrize("query_lens", [[5, 1, 12], [1, 1, 1]])
def test_layer_torch_and_triton_agree(query_lens):
    case = make_case([5, 20, 30], query_lens, 16, 4, 2, 16, seed=2)
    positions = torch.cat([torch.arange(s - q, s) for s, q in zip([5, 20, 30], query_lens)])
    weight = torch.rand(64) + 0.5
    cache = get_ops("torch").build_rope_cache(16, 64, 1e5)
    out_torch, kc_torch = _layer(get_ops("torch"), case, weight, cache, positions)
    out_triton, kc_triton = _layer(get_ops("triton"), case, weight, cache, positions)
    torch.testing.assert_close(kc_triton, kc_torch)
    torch.testing.assert_close(out_triton, out_torch, atol=1e-5, rtol=1e-5)
