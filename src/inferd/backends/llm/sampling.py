"""Choosing the next token of every sequence in a batch from its logits (pure torch functions).

One pass over the batch, every per-sequence setting a tensor row:

1. penalties: the repetition penalty (Hugging Face's: a positive logit of a token already in
   the prompt or the output is divided by it, a negative one multiplied), then the presence and
   frequency penalties (OpenAI's: ``logit -= frequency * count + presence * (count > 0)`` over
   the generated tokens);
2. greedy sequences (temperature below 1e-5) take the argmax, ties to the lowest id;
3. the others divide by their temperature, then drop tokens below ``min_p`` times the most
   likely one, keep the ``top_k`` most likely, then the smallest nucleus whose mass reaches
   ``top_p`` (always at least one token; ties at a cut go to the lowest ids, as after a stable
   sort), and draw one token from what is left by inverse transform sampling over the
   vocabulary in its own order, with one uniform number per sequence. A seeded sequence draws
   its number from its own :class:`torch.Generator`, so a seed gives the same tokens whatever
   the batch around it.

The log-probability returned with each token is that of the distribution actually sampled from
(vLLM's "processed" log-probabilities: after penalties, temperature and truncation,
renormalised). For a greedy sequence, whose distribution is a point mass, it is the
log-probability under the penalised logits at temperature 1.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence

import numpy as np
import torch

from inferd.backends.llm.params import SamplingParams


def seeded_generator(
    seed: int | None, device: torch.device | str = "cpu"
) -> torch.Generator | None:
    """A generator for a sequence's ``seed`` (None: use the global generator)."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed % 2**64)
    return generator


History = Sequence[int] | torch.Tensor  # a sequence's ids, a list or a 1-D int tensor


def _flatten(
    histories: Sequence[History], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every history's ids in one tensor, with each id's row and position in its history."""
    lists = [h for h in histories if not isinstance(h, torch.Tensor)]
    if len(lists) == len(histories):
        total = sum(len(h) for h in lists)
        flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=total)
        tokens = torch.from_numpy(flat).to(device)
    else:
        tokens = torch.cat(
            [
                h.reshape(-1).to(device=device, dtype=torch.int64)
                if isinstance(h, torch.Tensor)
                else torch.tensor(list(h), dtype=torch.int64, device=device)
                for h in histories
            ]
        )
    lengths = np.array([len(h) for h in histories], dtype=np.int64)
    rows = np.repeat(np.arange(len(histories), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    positions = np.arange(rows.shape[0], dtype=np.int64) - starts[rows]
    return tokens, torch.from_numpy(rows).to(device), torch.from_numpy(positions).to(device)


def apply_penalties(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    histories: Sequence[History],
    prompt_lens: Sequence[int] | None = None,
) -> torch.Tensor:
    """``logits`` with the repetition, presence and frequency penalties applied (a new tensor;
    ``logits`` itself when no sequence has a penalty).

    The repetition penalty looks at the whole history (prompt and output); the presence and
    frequency penalties at the output only, ``history[prompt_lens[i]:]`` (the whole history when
    ``prompt_lens`` is None).
    """
    n, vocab = logits.shape
    device = logits.device
    rep = [p.repetition_penalty for p in params]
    pres = [p.presence_penalty for p in params]
    freq = [p.frequency_penalty for p in params]
    repeating = any(r != 1.0 for r in rep)
    counting = any(x != 0.0 for x in pres) or any(x != 0.0 for x in freq)
    if not (repeating or counting):
        return logits
    tokens, rows, positions = _flatten(histories, device)
    if tokens.numel() == 0:
        return logits
    if int(tokens.min()) < 0 or int(tokens.max()) >= vocab:
        raise ValueError(f"a history holds a token id outside the vocabulary of {vocab}")
    out = logits
    if repeating:
        seen = torch.zeros((n, vocab), dtype=torch.bool, device=device)
        seen[rows, tokens] = True
        r = torch.tensor(rep, dtype=logits.dtype, device=device)[:, None]
        out = torch.where(seen, torch.where(logits > 0, logits / r, logits * r), out)
    if counting:
        if prompt_lens is None:
            generated = torch.ones_like(tokens, dtype=logits.dtype)
        else:
            firsts = torch.tensor(list(prompt_lens), dtype=torch.int64, device=device)
            generated = (positions >= firsts[rows]).to(logits.dtype)
        counts = torch.zeros((n, vocab), dtype=logits.dtype, device=device)
        counts.index_put_((rows, tokens), generated, accumulate=True)
        f = torch.tensor(freq, dtype=logits.dtype, device=device)[:, None]
        p = torch.tensor(pres, dtype=logits.dtype, device=device)[:, None]
        out = out - f * counts - p * (counts > 0).to(logits.dtype)
    return out


def _uniforms(
    rows: Sequence[int], generators: Sequence[torch.Generator | None], device: torch.device
) -> torch.Tensor:
    """One uniform number in [0, 1) per row: from the row's generator, else the global one
    (no synchronisation with the device)."""
    u = torch.rand(len(rows), dtype=torch.float64, device=device)
    seeded = [(j, g) for j, i in enumerate(rows) if (g := generators[i]) is not None]
    if seeded:
        draws = [
            torch.rand(1, dtype=torch.float64, generator=g, device=g.device) for _, g in seeded
        ]
        at = torch.tensor([j for j, _ in seeded], device=device)
        u[at] = torch.cat([d.to(device) for d in draws])
    return u


def _draw(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse transform sampling: per row, the index where the cumulative mass passes ``u``."""
    cdf = logp.exp().double().cumsum(-1)
    total = cdf[:, -1:]
    index = torch.searchsorted(cdf, u[:, None] * total, right=True)[:, 0]
    # the first index holding all the mass has a non-zero probability: never step past it
    full = (cdf >= total).to(torch.int8).argmax(-1)
    return torch.minimum(index, full)


# top-p looks for its nucleus among this many most likely tokens first, sorting the whole
# vocabulary only for a row whose nucleus is wider
NUCLEUS_WIDTH = 1024


def _keep_first(x: torch.Tensor, value: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Per row, the tokens above ``value`` and those equal to it, lowest ids first, up to
    ``count`` in all: the first ``count`` of a stable descending sort, without sorting."""
    above = x > value[:, None]
    ties = x == value[:, None]
    need = count - above.sum(-1)
    rank = ties.to(torch.int64).cumsum(-1)
    return above | (ties & (rank <= need[:, None]))


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """How many of each row's descending ``probs`` its nucleus holds (at least one)."""
    before = probs.cumsum(-1) - probs  # the mass of the more likely tokens
    return (before <= top_p[:, None]).sum(-1).clamp(min=1)


def _truncate(
    scaled: torch.Tensor,
    params: Sequence[SamplingParams],
    k: int,
    nucleus_width: int = NUCLEUS_WIDTH,
) -> torch.Tensor:
    """``scaled`` with min-p, top-k (``k``, shared by the rows; 0: off) and top-p applied as
    -inf, in vocabulary order. Ties at a cut go to the lowest ids."""
    vocab = scaled.shape[1]
    device = scaled.device
    neg = float("-inf")
    x = scaled
    if any(p.min_p > 0 for p in params):
        logs = [math.log(p.min_p) if p.min_p > 0 else neg for p in params]
        floor = x.max(-1).values + torch.tensor(logs, dtype=x.dtype, device=device)
        x = x.masked_fill(x < floor[:, None], neg)
    top_p = torch.tensor([p.top_p for p in params], dtype=x.dtype, device=device)
    open_rows = (top_p >= 1)[:, None]
    nucleus = any(p.top_p < 1 for p in params)
    if k > 0:
        values = x.topk(k, dim=-1).values  # descending
        x = x.masked_fill(~_keep_first(x, values[:, -1], torch.full_like(top_p, k).long()), neg)
        if nucleus:
            count = _nucleus(values.softmax(-1), top_p)
            cutoff = values.gather(1, (count - 1)[:, None])[:, 0]
            x = x.masked_fill(~(_keep_first(x, cutoff, count) | open_rows), neg)
        return x
    if not nucleus:
        return x
    width = min(vocab, nucleus_width)
    values = x.topk(width, dim=-1).values
    count = _nucleus((values - x.logsumexp(-1, keepdim=True)).exp(), top_p)
    cutoff = values.gather(1, (count - 1)[:, None])[:, 0]
    wide = ((count >= width) & ~open_rows[:, 0]).nonzero()[:, 0] if width < vocab else None
    if wide is not None and wide.numel():
        ordered = x[wide].sort(dim=-1, descending=True).values
        wide_count = _nucleus(ordered.softmax(-1), top_p[wide])
        count[wide] = wide_count
        cutoff[wide] = ordered.gather(1, (wide_count - 1)[:, None])[:, 0]
    return x.masked_fill(~(_keep_first(x, cutoff, count) | open_rows), neg)


def _truncates(p: SamplingParams) -> bool:
    return p.top_k > 0 or p.top_p < 1 or p.min_p > 0


class Sampler:
    """Chooses the next token of each sequence of a batch (stateless; safe to share)."""

    def sample(
        self,
        logits: torch.Tensor,
        params: Sequence[SamplingParams],
        generators: Sequence[torch.Generator | None],
        histories: Sequence[History],
        *,
        prompt_lens: Sequence[int] | None = None,
        suppress: Sequence[Collection[int]] | None = None,
        with_logprobs: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The chosen ids [n] int64 and their log-probabilities [n] float32 (NaN for the
        greedy rows when ``with_logprobs`` is False: their log-softmax is not computed).

        ``logits`` is [n, vocab], the last position of each sequence. ``histories`` holds each
        sequence's prompt and generated ids (for the penalties), ``prompt_lens`` how many of
        them are the prompt (presence and frequency penalties count only what follows; without
        it they count the whole history). ``suppress`` names token ids a sequence may not take
        this step (e.g. EOS before ``min_tokens``, see ``StopChecker.suppressed``).
        """
        n = logits.shape[0]
        if logits.dim() != 2 or not (len(params) == len(generators) == len(histories) == n):
            raise ValueError("logits must be [n, vocab] with one params, generator, history each")
        if prompt_lens is not None and len(prompt_lens) != n:
            raise ValueError("prompt_lens must hold one length per sequence")
        device = logits.device
        work = apply_penalties(logits.float(), params, histories, prompt_lens)
        if suppress is not None and any(suppress):
            rows = [i for i, ids in enumerate(suppress) for _ in ids]
            cols = [t for ids in suppress for t in ids]
            work = work.index_put(
                (torch.tensor(rows, device=device), torch.tensor(cols, device=device)),
                torch.tensor(float("-inf"), device=device),
            )
        greedy = [i for i, p in enumerate(params) if p.greedy]
        if len(greedy) == n:  # the common case: one argmax over the batch, no row picking
            chosen = work.argmax(-1)
            if not with_logprobs:
                return chosen, torch.full((n,), float("nan"), device=device)
            return chosen, work.log_softmax(-1).gather(1, chosen[:, None])[:, 0]
        chosen = torch.empty(n, dtype=torch.int64, device=device)
        logprobs = torch.full((n,), float("nan"), dtype=torch.float32, device=device)
        if greedy:
            index = torch.tensor(greedy, device=device)
            rows_logits = work[index]
            ids = rows_logits.argmax(-1)
            chosen[index] = ids
            if with_logprobs:
                logprobs[index] = rows_logits.log_softmax(-1).gather(1, ids[:, None])[:, 0]
        vocab = logits.shape[1]
        groups: dict[int | None, list[int]] = {}  # top-k (0: none) of truncating rows, or None
        for i, p in enumerate(params):
            if not p.greedy:
                key = (p.top_k if 0 < p.top_k < vocab else 0) if _truncates(p) else None
                groups.setdefault(key, []).append(i)
        for key, group in groups.items():
            index = torch.tensor(group, device=device)
            group_params = [params[i] for i in group]
            temps = torch.tensor([p.temperature for p in group_params], device=device)
            scaled = work[index] / temps[:, None]
            if key is not None:
                scaled = _truncate(scaled, group_params, key)
            logp = scaled.log_softmax(-1)
            picked = _draw(logp, _uniforms(group, generators, device))
            logprobs[index] = logp.gather(1, picked[:, None])[:, 0]
            chosen[index] = picked
        return chosen, logprobs


__all__ = ["NUCLEUS_WIDTH", "Sampler", "apply_penalties", "seeded_generator"]
