"""Sampling on the device (attnlab.serving.sampler): the Exp(1) noise of each sampled row is a hash of its sequence's
seed, its step and the token id, drawn on the logits' device. So the tokens follow chapter 5's next_token in
distribution (chi-square tests on a small vocabulary, against the exact probabilities and against next_token's own
draws), and a seed gives the same tokens whatever else the batch holds. A sampler whose noise is uniform instead of
exponential, a classic slip, fails the same tests."""
from __future__ import annotations

import pytest
import torch
from scipy import stats

from attnlab.decoding.sampling import filter_logits, next_token
from attnlab.serving import sampler
from attnlab.serving.sampler import exponential_noise, sample_on_device
from attnlab.serving.sequence import SamplingParams, Sequence

# A small vocabulary, probabilities far apart (0.57 to 0.002 at temperature 0.8): top_p 0.97 keeps four tokens.
LOGITS = torch.tensor([2.0, 1.2, 0.9, 0.1, -0.6, -2.5])
TEMPERATURE, TOP_P = 0.8, 0.97
DRAWS = 12_000
P_VALUE = 1e-4                   # a right sampler fails one of these tests once in 10,000 runs; the draws are seeded


def after_steps(seq: Sequence, steps: int) -> Sequence:
    seq.token_ids += [0] * steps                     # the noise of a row depends on how many tokens it has drawn
    return seq


def ours(seeds_and_steps: list[tuple[int, int]]) -> torch.Tensor:
    """One token per (seed, step), all rows drawn in one call of sample_on_device."""
    params = SamplingParams(temperature=TEMPERATURE, top_p=TOP_P)
    seqs = []
    for i, (seed, steps) in enumerate(seeds_and_steps):
        seq = after_steps(Sequence(i, [1], params), steps)
        seq.seed = seed
        seqs.append(seq)
    return sample_on_device(LOGITS.expand(len(seqs), -1).contiguous(), seqs)


def counts(tokens: torch.Tensor) -> torch.Tensor:
    return torch.bincount(tokens, minlength=len(LOGITS))


def chapter_5s_probabilities() -> torch.Tensor:
    return filter_logits(LOGITS[None], TEMPERATURE, None, TOP_P).softmax(-1)[0].double()


def fits_chapter_5(tokens: torch.Tensor) -> float:
    """The p-value of a chi-square test of the counts against next_token's probabilities, over the tokens it can
    draw (a token top_p drops must never be drawn)."""
    probs, seen = chapter_5s_probabilities(), counts(tokens)
    kept = probs > 0
    assert seen[~kept].sum() == 0, f"tokens that top_p drops were drawn: {seen.tolist()}"
    expected = probs[kept] / probs[kept].sum() * len(tokens)          # summing to the draws exactly, in float64
    return stats.chisquare(seen[kept].double().numpy(), expected.numpy()).pvalue


SEED_ROWS = [(seed, 0) for seed in range(DRAWS)]                       # many seeds, each at its first token
STEP_ROWS = [(seed, step) for seed in (3, 10**12) for step in range(DRAWS // 2)]   # two seeds, many steps


@pytest.mark.parametrize("rows", [SEED_ROWS, STEP_ROWS], ids=["over seeds", "over steps"])
def test_sampled_tokens_follow_chapter_5s_distribution(rows):
    assert fits_chapter_5(ours(rows)) > P_VALUE


def test_sampled_tokens_are_distributed_as_next_tokens_own_draws():
    """A two-sample test: our counts against next_token's, drawn with torch.multinomial and a generator."""
    generator = torch.Generator().manual_seed(0)
    theirs = torch.cat([next_token(LOGITS.expand(1000, -1), TEMPERATURE, None, TOP_P, generator)
                        for _ in range(DRAWS // 1000)])
    table = torch.stack([counts(ours(SEED_ROWS)), counts(theirs)])
    table = table[:, table.sum(0) > 0]
    assert stats.chi2_contingency(table.numpy()).pvalue > P_VALUE


def test_uniform_noise_instead_of_exponential_fails_these_tests(monkeypatch):
    """argmax(p / u) with u ~ U(0, 1) favours the likeliest token more than p does: the tests must see it."""
    monkeypatch.setattr(sampler, "exponential_noise", lambda seeds, steps, vocab: torch.exp(
        -exponential_noise(seeds, steps, vocab)))
    assert fits_chapter_5(ours(SEED_ROWS)) < P_VALUE


def test_the_noise_is_exp_1_and_a_pure_function_of_seed_step_and_token():
    seeds, steps = torch.tensor([0, 5, 5, 2**62]), torch.tensor([0, 0, 1, 7])
    q = exponential_noise(seeds, steps, 50_000)
    assert q.dtype == torch.float32 and q.shape == (4, 50_000) and (q > 0).all() and q.isfinite().all()
    assert stats.kstest(q.flatten().numpy(), "expon").pvalue > P_VALUE
    torch.testing.assert_close(exponential_noise(seeds[1:3], steps[1:3], 50_000), q[1:3], rtol=0, atol=0)
    assert (q[1] != q[2]).float().mean() > 0.99, "another step of the same seed must draw other noise"
    assert (exponential_noise(seeds, steps, 100) == q[:, :100]).all(), "a token's noise depends on the vocabulary size"


def test_a_seed_gives_the_same_tokens_whatever_the_batch_holds():
    """Row by row alone, and all together beside greedy rows and other seeds: the same tokens, at every step."""
    torch.manual_seed(1)
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.8, seed=3),
              SamplingParams(temperature=1.3, top_p=0.9, seed=4), SamplingParams(temperature=0.5, top_p=1.0, seed=5),
              SamplingParams(temperature=1.0, top_p=0.3, seed=6)]
    for step in range(20):
        logits = torch.randn(len(params), 300) * 4
        batch = [after_steps(Sequence(i, [1], p), step) for i, p in enumerate(params)]
        together = sample_on_device(logits, batch).tolist()
        alone = [int(sample_on_device(logits[r:r + 1], [seq])) for r, seq in enumerate(batch)]
        assert together == alone
        assert together[0] == int(logits[0].argmax()), "a greedy row takes the argmax"
        kept = filter_logits(logits[4:5], 1.0, None, 0.3)[0].isfinite()
        assert kept[together[4]], "a token outside the row's top_p was drawn"
    with pytest.raises(ValueError, match="need logits"):
        sample_on_device(torch.zeros(2, 300), batch)


def test_a_seed_outside_int64_is_refused():
    with pytest.raises(ValueError, match="seed must be in"):
        SamplingParams(temperature=1.0, seed=-1)
    with pytest.raises(ValueError, match="seed must be in"):
        SamplingParams(temperature=1.0, n=2, seed=2**63 - 2)
