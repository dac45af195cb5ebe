"""RMSNorm, rotary, SiLU-and-mul and KV store: Triton vs torch reference vs HF Llama."""
import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb, rotate_half

from builtin_engine.kernels.activation import silu_and_mul_torch, silu_and_mul_triton
from builtin_engine.kernels.kv_store import store_kv_torch, store_kv_triton
from builtin_engine.kernels.layernorm import rms_norm_torch, rms_norm_triton
from builtin_engine.kernels.rotary import build_rope_cache, rotary_torch, rotary_triton

TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def _close(a, b, dtype):
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(a.float(), b.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("hidden", [64, 37])
def test_rms_norm_matches_hf_and_reference(dtype, hidden):
    x = torch.randn(6, hidden).to(dtype)
    w = (torch.rand(hidden) + 0.5).to(dtype)
    hf = LlamaRMSNorm(hidden, eps=1e-5).to(dtype)
    hf.weight.data.copy_(w)
    expected = hf(x)
    _close(rms_norm_torch(x, w, 1e-5), expected, dtype)
    _close(rms_norm_triton(x, w, 1e-5), expected, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rms_norm_fused_residual(dtype):
    x, res = torch.randn(2, 3, 48).to(dtype), torch.randn(2, 3, 48).to(dtype)
    w = torch.randn(48).to(dtype)
    out_ref, res_ref = rms_norm_torch(x, w, 1e-6, res)
    out, new_res = rms_norm_triton(x, w, 1e-6, res)
    assert torch.equal(res_ref, x + res)  # residual = x + residual, then norm of it
    _close(new_res, res_ref, dtype)
    _close(out, out_ref, dtype)
    _close(out_ref, rms_norm_torch(x + res, w, 1e-6), dtype)


def test_rope_cache_layout():
    cache = build_rope_cache(8, 10, 10000.0)
    assert cache.shape == (10, 8)
    assert torch.allclose(cache[0], torch.tensor([1.0] * 4 + [0.0] * 4))
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 8, 2).float() / 8)
    assert torch.allclose(cache[3, :4], torch.cos(3 * inv_freq))
    assert torch.allclose(cache[3, 4:], torch.sin(3 * inv_freq))


def _hf_rope(x_heads, positions, cache):
    """HF: q * cos + rotate_half(q) * sin with cos = cat(freqs, freqs).cos()."""
    cos, sin = cache[positions].chunk(2, dim=-1)
    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    q = x_heads.transpose(0, 1).float()  # [H, T, D]
    rotated, _ = apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=0)
    assert rotate_half is not None
    return rotated.transpose(0, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fn", [rotary_torch, rotary_triton])
def test_rotary_flat_slices_of_fused_qkv(fn, dtype):
    """q/k as column slices of one qkv tensor (row stride != width), [T, H*D] layout."""
    heads_q, heads_k, dim, tokens = 6, 2, 16, 5
    cache = build_rope_cache(dim, 64, 10000.0)
    qkv = torch.randn(tokens, (heads_q + 2 * heads_k) * dim).to(dtype)
    original = qkv.clone()
    q, k = qkv[:, :heads_q * dim], qkv[:, heads_q * dim:(heads_q + heads_k) * dim]
    positions = torch.tensor([0, 5, 9, 63, 1])
    fn(q, k, positions, cache)
    q_ref = _hf_rope(original[:, :heads_q * dim].view(tokens, heads_q, dim), positions, cache)
    k_ref = _hf_rope(original[:, heads_q * dim:(heads_q + heads_k) * dim]
                     .view(tokens, heads_k, dim), positions, cache)
    _close(q.view(tokens, heads_q, dim), q_ref.to(dtype), dtype)
    _close(k.view(tokens, heads_k, dim), k_ref.to(dtype), dtype)
    assert torch.equal(qkv[:, (heads_q + heads_k) * dim:], original[:, (heads_q + heads_k) * dim:])


def test_rotary_three_dim_layout_matches_flat():
    cache = build_rope_cache(32, 16, 1e5)
    q, k = torch.randn(4, 3, 32), torch.randn(4, 1, 32)
    positions = torch.tensor([3, 0, 15, 7])
    q2, k2 = q.clone().view(4, 96), k.clone().view(4, 32)
    rotary_triton(q, k, positions, cache)
    rotary_torch(q2, k2, positions, cache)
    torch.testing.assert_close(q.view(4, 96), q2)
    torch.testing.assert_close(k.view(4, 32), k2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("width", [8, 1500])
def test_silu_and_mul(dtype, width):
    x = torch.randn(3, 2 * width).to(dtype)
    expected = torch.nn.functional.silu(x[:, :width]) * x[:, width:]
    _close(silu_and_mul_torch(x), expected, dtype)
    _close(silu_and_mul_triton(x), expected, dtype)


def test_silu_and_mul_rejects_odd_width():
    with pytest.raises(ValueError, match="even"):
        silu_and_mul_triton(torch.randn(2, 7))


@pytest.mark.parametrize("block_size", [16, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_store_kv(block_size, dtype):
    cache_shape = (6, block_size, 3, 8)
    k_ref, v_ref = torch.randn(cache_shape).to(dtype), torch.randn(cache_shape).to(dtype)
    k_out, v_out = k_ref.clone(), v_ref.clone()
    key, value = torch.randn(4, 3, 8), torch.randn(4, 3, 8)  # fp32 rows cast into the cache
    slots = torch.tensor([0, block_size + 2, 6 * block_size - 1, 3 * block_size + 1])
    store_kv_torch(key, value, k_ref, v_ref, slots)
    store_kv_triton(key, value, k_out, v_out, slots)
    assert torch.equal(k_out, k_ref) and torch.equal(v_out, v_ref)
    assert torch.equal(k_out.view(-1, 3, 8)[block_size + 2], key[1].to(dtype))


def test_store_kv_skips_negative_slots():
    k_cache, v_cache = torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8)
    key = torch.ones(3, 1, 8)
    store_kv_triton(key, key, k_cache, v_cache, torch.tensor([1, -1, 6]))
    assert k_cache.view(-1, 8).sum(-1).tolist() == [0, 8, 0, 0, 0, 0, 8, 0]
