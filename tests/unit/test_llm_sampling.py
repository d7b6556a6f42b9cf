"""The llm runtime's batched sampler against naive reference implementations."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.backends.llm.params import SamplingParams
from inferd.backends.llm.sampling import Sampler, apply_penalties, seeded_generator

SAMPLER = Sampler()


def logit_rows(n: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randn((n, vocab), generator=torch.Generator().manual_seed(seed)) * 3


@st.composite
def small_logits(draw: st.DrawFn) -> torch.Tensor:
    n = draw(st.integers(1, 4))
    vocab = draw(st.integers(1, 12))
    # few distinct values, so ties are common
    values = draw(
        st.lists(st.integers(-8, 8), min_size=n * vocab, max_size=n * vocab).map(
            lambda v: [x / 2 for x in v]
        )
    )
    return torch.tensor(values, dtype=torch.float32).reshape(n, vocab)


@given(small_logits())
@settings(max_examples=150, deadline=None)
def test_greedy_is_the_argmax_with_ties_to_the_lowest_id(logits: torch.Tensor) -> None:
    n = logits.shape[0]
    params = [SamplingParams(temperature=0.0)] * n
    ids, logprobs = SAMPLER.sample(logits, params, [None] * n, [[]] * n)
    for row, chosen in zip(logits.tolist(), ids.tolist(), strict=True):
        best = max(row)
        assert chosen == row.index(best)
    expected = torch.log_softmax(logits, -1).gather(1, ids[:, None])[:, 0]
    torch.testing.assert_close(logprobs, expected)
    assert ids.dtype == torch.int64
    assert logprobs.dtype == torch.float32


@given(small_logits(), st.floats(0.1, 3.0), st.integers(0, 2**32))
@settings(max_examples=100, deadline=None)
def test_top_k_one_is_greedy(logits: torch.Tensor, temperature: float, seed: int) -> None:
    n = logits.shape[0]
    greedy, _ = SAMPLER.sample(logits, [SamplingParams(temperature=0)] * n, [None] * n, [[]] * n)
    params = [SamplingParams(temperature=temperature, top_k=1)] * n
    ids, logprobs = SAMPLER.sample(logits, params, [seeded_generator(seed)] * n, [[]] * n)
    assert ids.tolist() == greedy.tolist()
    assert logprobs.tolist() == [0.0] * n  # the whole mass on one token


def nucleus(row: list[float], temperature: float, top_p: float) -> set[int]:
    """Tokens in the smallest most-likely prefix whose mass reaches ``top_p`` (float64)."""
    scaled = [x / temperature for x in row]
    top = max(scaled)
    weights = [math.exp(x - top) for x in scaled]
    total = sum(weights)
    order = sorted(range(len(row)), key=lambda i: (-weights[i], i))
    kept, mass = set(), 0.0
    for i in order:
        if mass > top_p + 1e-5:
            break
        kept.add(i)
        mass += weights[i] / total
    return kept


@given(small_logits(), st.floats(0.01, 1.0), st.floats(0.2, 2.0), st.integers(0, 2**32))
@settings(max_examples=80, deadline=None)
def test_top_p_samples_only_from_the_nucleus(
    logits: torch.Tensor, top_p: float, temperature: float, seed: int
) -> None:
    n = logits.shape[0]
    params = [SamplingParams(temperature=temperature, top_p=top_p)] * n
    generator = seeded_generator(seed)
    for _ in range(3):
        ids, logprobs = SAMPLER.sample(logits, params, [generator] * n, [[]] * n)
        for row, chosen in zip(logits.tolist(), ids.tolist(), strict=True):
            assert chosen in nucleus(row, temperature, top_p)
        assert bool((logprobs <= 1e-6).all())


def test_top_p_keeps_the_whole_nucleus_in_proportion() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    draws = 2000
    logits = probs.log().expand(draws, -1)
    generator = seeded_generator(77)
    ids, _ = SAMPLER.sample(
        logits, [SamplingParams(top_p=0.85)] * draws, [generator] * draws, [[]] * draws
    )
    freq = torch.bincount(ids, minlength=4).double() / draws
    expected = torch.tensor([0.5, 0.3, 0.15, 0.0], dtype=torch.float64) / 0.95
    # the same bound as the temperature test: over three standard deviations
    assert torch.allclose(freq, expected, atol=0.035), freq
    assert int(freq[3] * draws) == 0


def test_top_k_samples_only_from_the_k_most_likely() -> None:
    logits = logit_rows(8, 50, seed=1)
    params = [SamplingParams(top_k=3, temperature=2.0)] * 8
    top3 = logits.topk(3, dim=-1).indices.tolist()
    seen: set[int] = set()
    for step in range(50):
        ids, _ = SAMPLER.sample(logits, params, [seeded_generator(step)] * 8, [[]] * 8)
        for allowed, chosen in zip(top3, ids.tolist(), strict=True):
            assert chosen in allowed
        seen.update(ids.tolist())
    assert len(seen) > 8  # it does sample, not just take the argmax


def test_min_p_drops_tokens_below_its_share_of_the_most_likely() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    params = [SamplingParams(min_p=0.2)]  # floor 0.1: token 3 is out
    generator = seeded_generator(0)
    counts = [0] * 4
    for _ in range(400):
        ids, _ = SAMPLER.sample(logits, params, [generator], [[]])
        counts[int(ids[0])] += 1
    assert counts[3] == 0
    assert min(counts[:3]) > 0


def test_temperature_gives_the_softmax_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    temperature = 0.7
    expected = torch.softmax(logits[0] / temperature, -1)
    draws = 2000
    batch = logits.expand(draws, -1)
    generator = seeded_generator(1234)
    ids, logprobs = SAMPLER.sample(
        batch,
        [SamplingParams(temperature=temperature)] * draws,
        [generator] * draws,
        [[]] * draws,
    )
    freq = torch.bincount(ids, minlength=6).double() / draws
    # 2000 draws: a frequency's standard deviation is at most sqrt(0.25 / 2000) ~ 0.011;
    # 0.035 is more than three of them
    assert torch.allclose(freq, expected.double(), atol=0.035), (freq, expected)
    torch.testing.assert_close(logprobs, expected.log()[ids])


def test_truncated_logprobs_are_of_the_renormalised_distribution() -> None:
    logits = logit_rows(4, 30, seed=3)
    params = [SamplingParams(top_k=5, temperature=0.8)] * 4
    ids, logprobs = SAMPLER.sample(logits, params, [seeded_generator(9)] * 4, [[]] * 4)
    scaled = logits / 0.8
    top = scaled.topk(5, dim=-1)
    for r in range(4):
        renormalised = torch.log_softmax(top.values[r], -1)
        at = top.indices[r].tolist().index(int(ids[r]))
        assert math.isclose(float(logprobs[r]), float(renormalised[at]), abs_tol=1e-5)


def steps_alone_and_in_batch(seed: int, params: SamplingParams, steps: int) -> None:
    vocab = 40
    others = [
        SamplingParams(temperature=0),
        SamplingParams(top_p=0.8, seed=99),
        SamplingParams(top_k=4),
        SamplingParams(temperature=1.5, min_p=0.1),
    ]
    alone_gen = seeded_generator(seed)
    batch_gen = seeded_generator(seed)
    other_gens = [seeded_generator(p.seed) for p in others]
    for step in range(steps):
        logits = logit_rows(1 + len(others), vocab, seed=step)
        mine = logits[2:3]
        alone, alone_lp = SAMPLER.sample(mine, [params], [alone_gen], [[]])
        # the same row in the middle of a batch of differently set sequences
        batch_params = [*others[:2], params, *others[2:]]
        gens = [*other_gens[:2], batch_gen, *other_gens[2:]]
        batched, batched_lp = SAMPLER.sample(logits, batch_params, gens, [[]] * 5)
        assert int(batched[2]) == int(alone[0])
        assert float(batched_lp[2]) == float(alone_lp[0])


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(seed=5),
        SamplingParams(seed=5, top_p=0.9, temperature=1.3),
        SamplingParams(seed=5, top_k=7),
    ],
)
def test_a_seed_gives_the_same_tokens_whatever_the_batch(params: SamplingParams) -> None:
    steps_alone_and_in_batch(5, params, steps=30)


def test_a_seed_reproduces_and_another_seed_differs() -> None:
    logits = logit_rows(1, 200, seed=0)
    params = [SamplingParams(temperature=1.0)]

    def run(seed: int) -> list[int]:
        generator = seeded_generator(seed)
        return [int(SAMPLER.sample(logits, params, [generator], [[]])[0][0]) for _ in range(20)]

    assert run(11) == run(11)
    assert run(11) != run(12)
    assert seeded_generator(None) is None
    assert run(-1) == run(2**64 - 1)  # seeds are taken modulo 2**64


def naive_penalties(
    row: list[float], params: SamplingParams, history: list[int], prompt_len: int
) -> list[float]:
    out = list(row)
    for token in set(history):
        if out[token] > 0:
            out[token] /= params.repetition_penalty
        else:
            out[token] *= params.repetition_penalty
    generated = history[prompt_len:]
    for token in set(generated):
        out[token] -= params.frequency_penalty * generated.count(token)
        out[token] -= params.presence_penalty
    return out


@given(
    st.lists(
        st.tuples(
            st.floats(0.5, 2.0),
            st.floats(-2, 2),
            st.floats(-2, 2),
            st.lists(st.integers(0, 9), max_size=12),
            st.integers(0, 12),
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 1000),
)
@settings(max_examples=100, deadline=None)
def test_penalties_match_a_naive_reference(
    rows: list[tuple[float, float, float, list[int], int]], seed: int
) -> None:
    n = len(rows)
    logits = logit_rows(n, 10, seed)
    params = [
        SamplingParams(repetition_penalty=r, presence_penalty=p, frequency_penalty=f)
        for r, p, f, _, _ in rows
    ]
    histories = [h for _, _, _, h, _ in rows]
    prompt_lens = [min(k, len(h)) for _, _, _, h, k in rows]
    got = apply_penalties(logits, params, histories, prompt_lens)
    for i in range(n):
        expected = naive_penalties(logits[i].tolist(), params[i], histories[i], prompt_lens[i])
        torch.testing.assert_close(got[i], torch.tensor(expected), atol=1e-5, rtol=1e-5)
    # the greedy choice follows the penalised logits
    greedy = [
        SamplingParams(
            temperature=0,
            repetition_penalty=p.repetition_penalty,
            presence_penalty=p.presence_penalty,
            frequency_penalty=p.frequency_penalty,
        )
        for p in params
    ]
    ids, _ = SAMPLER.sample(logits, greedy, [None] * n, histories, prompt_lens=prompt_lens)
    assert ids.tolist() == got.argmax(-1).tolist()


def test_penalties_without_prompt_lengths_count_the_whole_history() -> None:
    logits = torch.zeros((1, 4))
    params = [SamplingParams(frequency_penalty=1.0)]
    got = apply_penalties(logits, params, [[1, 1, 2]])
    assert got.tolist() == [[0.0, -2.0, -1.0, 0.0]]
    assert apply_penalties(logits, [SamplingParams()], [[1]]) is logits  # nothing to do


def test_suppressed_ids_are_never_chosen() -> None:
    logits = torch.tensor([[5.0, 1.0, 0.0], [0.0, 9.0, 0.0]])
    params = [SamplingParams(temperature=0), SamplingParams(seed=1)]
    ids, _ = SAMPLER.sample(
        logits, params, [None, seeded_generator(1)], [[], []], suppress=[{0}, {1}]
    )
    assert int(ids[0]) == 1
    assert int(ids[1]) != 1


def test_a_history_token_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        SAMPLER.sample(torch.zeros((1, 4)), [SamplingParams(repetition_penalty=1.1)], [None], [[4]])


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="one params"):
        SAMPLER.sample(torch.zeros((2, 4)), [SamplingParams()], [None], [[]])


def test_histories_as_tensors_give_the_same_penalties() -> None:
    logits = logit_rows(3, 20, seed=4)
    params = [SamplingParams(repetition_penalty=1.5, frequency_penalty=0.5, presence_penalty=1)] * 3
    lists = [[1, 2, 2, 5], [], [19, 0, 0, 0]]
    tensors = [torch.tensor(h, dtype=torch.int64) for h in lists]
    expected = apply_penalties(logits, params, lists, [1, 0, 2])
    assert torch.equal(apply_penalties(logits, params, tensors, [1, 0, 2]), expected)
    mixed: list[list[int] | torch.Tensor] = [tensors[0], lists[1], tensors[2]]
    assert torch.equal(apply_penalties(logits, params, mixed, [1, 0, 2]), expected)
    for i, h in enumerate(lists):
        reference = naive_penalties(logits[i].tolist(), params[i], h, [1, 0, 2][i])
        torch.testing.assert_close(expected[i], torch.tensor(reference))


def reference_kept(row: list[float], p: SamplingParams) -> tuple[set[int], list[float]]:
    """The tokens min-p, top-k and top-p keep, by a stable descending sort (ties to the lowest
    id), and the values that sit at a cut (for the caller to avoid rounding ties)."""
    scaled = [x / p.temperature for x in row]
    kept = sorted(range(len(row)), key=lambda i: (-scaled[i], i))
    edges: list[float] = []
    if p.min_p > 0:
        floor = scaled[kept[0]] + math.log(p.min_p)
        edges += [x - floor for x in scaled]
        kept = [i for i in kept if scaled[i] >= floor]
    if p.top_k > 0:
        kept = kept[: p.top_k]
    if p.top_p < 1:
        top = scaled[kept[0]]
        weights = [math.exp(scaled[i] - top) for i in kept]
        total = sum(weights)
        nucleus, before = [], 0.0
        for i, w in zip(kept, weights, strict=True):
            edges.append(before - p.top_p)
            if before > p.top_p and nucleus:
                break
            nucleus.append(i)
            before += w / total
        kept = nucleus
    return set(kept), edges


@given(
    st.lists(st.integers(-12, 12), min_size=2, max_size=40),
    st.integers(0, 6),
    st.sampled_from([1.0, 0.3, 0.5, 0.77, 0.9, 0.95]),
    st.sampled_from([0.0, 0.05, 0.3]),
    st.sampled_from([0.5, 1.0, 1.7]),
    st.sampled_from([3, 1024]),
)
@settings(max_examples=300, deadline=None)
def test_truncation_keeps_what_a_stable_sort_keeps(
    values: list[int], top_k: int, top_p: float, min_p: float, temperature: float, width: int
) -> None:
    from hypothesis import assume

    from inferd.backends.llm.sampling import _truncate

    row = [v / 4 for v in values]
    params = SamplingParams(top_k=top_k, top_p=top_p, min_p=min_p, temperature=temperature)
    expected, edges = reference_kept(row, params)
    assume(all(abs(e) > 1e-4 for e in edges))  # no cut decided by rounding
    scaled = torch.tensor([row]) / temperature
    k = top_k if 0 < top_k < len(row) else 0
    masked = _truncate(scaled, [params], k, nucleus_width=width)
    kept = {i for i, x in enumerate(masked[0].tolist()) if x != float("-inf")}
    assert kept == expected
    # the rows of a batch are cut independently of one another
    other = SamplingParams(top_k=top_k, top_p=0.5, min_p=0.0, temperature=temperature)
    batch = _truncate(torch.cat([scaled, scaled.flip(-1)]), [params, other], k, width)
    assert torch.equal(batch[0], masked[0])


def test_a_nucleus_wider_than_the_first_look_is_found_whole() -> None:
    vocab = 1500
    logits = torch.zeros((400, vocab))  # flat: this nucleus is 1351 tokens, past the first 1024
    top_p = (1350 + 0.5) / vocab  # half a token from either cut, far above float32 rounding
    ids, logprobs = SAMPLER.sample(
        logits, [SamplingParams(top_p=top_p)] * 400, [seeded_generator(2)] * 400, [[]] * 400
    )
    assert int(ids.max()) >= 1024
    assert int(ids.max()) < 1351
    torch.testing.assert_close(logprobs, torch.full((400,), -math.log(1351)))


@pytest.mark.parametrize("mixed", [False, True])
def test_without_logprobs_the_same_tokens_are_chosen(mixed: bool) -> None:
    """``with_logprobs=False`` skips the greedy rows' log-softmax: the same ids (an all-greedy
    batch takes one argmax, a mixed one picks its rows), NaN for the greedy rows' log-probs,
    the sampled rows' log-probs unchanged."""
    n, vocab = 6, 50
    logits = logit_rows(n, vocab, 11)
    sampled = SamplingParams(temperature=0.8, top_k=10, seed=5)
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.3)
    params = [sampled if mixed and i % 2 else greedy for i in range(n)]
    histories = [[i, i + 1, 7] for i in range(n)]

    def run(with_logprobs: bool) -> tuple[torch.Tensor, torch.Tensor]:
        generators = [seeded_generator(p.seed) for p in params]
        return SAMPLER.sample(logits, params, generators, histories, with_logprobs=with_logprobs)

    ids, logprobs = run(True)
    fast_ids, fast_logprobs = run(False)
    assert fast_ids.tolist() == ids.tolist()
    penalised = apply_penalties(logits, params, histories)
    assert ids.tolist()[0] == int(penalised[0].argmax())
    for row, p in enumerate(params):
        if p.greedy:
            assert math.isnan(float(fast_logprobs[row]))
            assert not math.isnan(float(logprobs[row]))
        else:
            assert float(fast_logprobs[row]) == pytest.approx(float(logprobs[row]))
