"""Sampler: seeded reproducibility, greedy equivalences, truncation, min_tokens, logit bias,
penalties."""
from __future__ import annotations

import torch

from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.runner.sampler import Sampler

VOCAB = 512
EOS = 7


def _logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 2


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _draws(params: SamplingParams, seed: int, steps: int = 20) -> list[int]:
    sampler, gen = Sampler(), _gen(seed)
    return [sampler.sample(_logits(1, step), [params], [gen], [step], EOS)[0]
            for step in range(steps)]


def test_same_seed_same_tokens_different_seed_different_tokens():
    params = SamplingParams(temperature=1.0, seed=11)
    assert _draws(params, 11) == _draws(params, 11)
    assert _draws(params, 11) != _draws(params, 12)


def test_seeded_row_does_not_depend_on_the_batch():
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=5)
    logits = _logits(4, seed=3)
    alone = Sampler().sample(logits[2:3].clone(), [params], [_gen(5)], [0], EOS)
    others = [SamplingParams(temperature=0.0), SamplingParams(temperature=1.3, top_k=5),
              params, SamplingParams(temperature=1.0)]
    batched = Sampler().sample(logits.clone(), others, [None, _gen(1), _gen(5), None],
                               [0, 0, 0, 0], EOS)
    assert batched[2] == alone[0]
    assert batched[0] == int(logits[0].argmax())


def test_top_k_one_and_temperature_zero_are_greedy():
    logits = _logits(6, seed=9)
    expected = logits.argmax(dim=-1).tolist()
    for params in (SamplingParams(temperature=1.5, top_k=1), SamplingParams(temperature=0.0)):
        got = Sampler().sample(logits.clone(), [params] * 6, [None] * 6, [0] * 6, EOS)
        assert got == expected


def test_top_k_and_top_p_restrict_the_support():
    logits = _logits(1, seed=4).repeat(400, 1)
    top5 = set(logits[0].topk(5).indices.tolist())
    got = Sampler().sample(logits.clone(), [SamplingParams(top_k=5)] * 400, [None] * 400,
                           [0] * 400, EOS)
    assert set(got) <= top5 and len(set(got)) > 1
    peaked = torch.full((300, VOCAB), -5.0)
    peaked[:, 3], peaked[:, 4] = 5.0, 4.0  # token 3 alone holds ~73% of the mass
    got = Sampler().sample(peaked, [SamplingParams(top_p=0.7)] * 300, [None] * 300,
                           [0] * 300, EOS)
    assert set(got) == {3}


def test_temperature_sampling_follows_the_distribution():
    logits = torch.full((4000, VOCAB), -30.0)
    logits[:, 10], logits[:, 11] = 0.0, -1.0986  # p ~ 0.75 / 0.25
    got = torch.tensor(Sampler().sample(logits, [SamplingParams()] * 4000, [None] * 4000,
                                        [0] * 4000, EOS))
    share = (got == 10).float().mean().item()
    assert 0.71 < share < 0.79 and set(got.tolist()) == {10, 11}


def test_min_tokens_masks_eos_and_stop_ids():
    logits = torch.zeros(3, VOCAB)
    logits[:, EOS], logits[:, 100], logits[:, 200], logits[:, 50] = 10.0, 9.0, 8.0, 1.0
    params = [SamplingParams(temperature=0.0, min_tokens=4, stop_token_ids=[100])] * 3
    sampler = Sampler(stop_token_ids=[200])  # e.g. <|endoftext|> besides eos
    got = sampler.sample(logits.clone(), params, [None] * 3, [0, 3, 4], EOS)
    assert got == [50, 50, EOS]


def test_logit_bias_moves_only_its_row():
    logits = _logits(2)
    plain = logits.argmax(dim=-1).tolist()
    target = (plain[0] + 1) % VOCAB
    biased = SamplingParams(temperature=0.0, logit_bias={target: 100.0, VOCAB + 5: 100.0})
    tokens = Sampler().sample(logits.clone(), [biased, SamplingParams(temperature=0.0)],
                              [None, None], [0, 0], EOS)
    assert tokens == [target, plain[1]]
    banned = SamplingParams(temperature=0.0, logit_bias={plain[0]: -100.0})
    assert Sampler().sample(logits.clone(), [banned], [None], [0], EOS)[0] != plain[0]


def test_frequency_and_presence_penalties_count_output_tokens_only():
    logits = torch.zeros(1, VOCAB)
    logits[0, 3], logits[0, 4], logits[0, 5] = 3.0, 2.5, 2.0
    greedy = dict(temperature=0.0)
    history = ([3, 3, 9], 1)  # prompt [3], outputs [3, 9]
    pick = lambda **kw: Sampler().sample(logits.clone(), [SamplingParams(**greedy, **kw)],  # noqa: E731
                                         [None], [2], EOS, [history])[0]
    assert pick() == 3
    assert pick(frequency_penalty=1.0) == 4     # 3 - 1x1 = 2.0 < 2.5
    assert pick(presence_penalty=0.4) == 3      # 2.6 > 2.5
    assert pick(presence_penalty=0.6) == 4
    only_prompt = ([5, 5, 5], 3)                # no outputs yet: nothing to penalise
    assert Sampler().sample(logits.clone(), [SamplingParams(**greedy, frequency_penalty=2.0)],
                            [None], [0], EOS, [only_prompt])[0] == 3


def test_repetition_penalty_covers_prompt_and_output():
    logits = torch.zeros(1, VOCAB)
    logits[0, 3], logits[0, 4], logits[0, 6] = 3.0, 2.0, -1.0
    params = [SamplingParams(temperature=0.0, repetition_penalty=2.0)]
    out = logits.clone()
    assert Sampler().sample(out, params, [None], [0], EOS, [([3, 6], 2)])[0] == 4
    assert out[0, 3] == 1.5 and out[0, 6] == -2.0  # positive divided, negative multiplied


def test_greedy_takes_the_first_of_equal_maxima_like_argmax():
    logits = torch.randn(8, 300)
    logits[3, 7] = logits[3, 250] = logits[3].max() + 1.0  # a tie: the lower id wins
    logits[5, :] = 0.0                                      # all equal: id 0
    params = [SamplingParams(temperature=0.0)] * 8
    tokens = Sampler().sample(logits.clone(), params, [None] * 8, [0] * 8, None)
    assert tokens == logits.argmax(dim=-1).tolist()
    assert tokens[3] == 7 and tokens[5] == 0
