"""The Bigram-Backcopy (BB) task (Guo et al. 2024, "Active-Dormant Attention Heads"): where sinks provably emerge.

A sequence is a BOS token, then a bigram Markov chain over a text's characters, except that after a *trigger*
(one of the k most frequent characters) the next token copies the token before the trigger::

    BOS  a  b  [t]  b  c  [t]  c ...        ([t] a trigger: the token after it repeats the one before it)

Predicting the next token after a non-trigger needs only the current token (the bigram: an MLP's job);
after a trigger it needs the previous one (an attention head's job: look one back and copy). So the head
has work on trigger queries only; elsewhere it is best off adding nothing, and softmax must still put its
mass somewhere: on BOS, seen by every query. That head is *active* on triggers and *dormant* elsewhere,
and the dormant mass on BOS is the sink.

The chain is estimated from a real text's character bigrams (the paper's: Tiny Shakespeare's 65 symbols);
a character that never precedes another (the text's last) moves by the unigram distribution. The first
token after BOS is drawn from the unigram distribution of the non-triggers, so a copy always has a real
token to copy. Pure torch: the data, and the loss no predictor can beat on it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from attnlab.core.errors import ConfigError


@dataclass(frozen=True)
class BBTask:
    """The chain over V symbols (ids 0..V-1) and BOS (id V)."""

    transition: torch.Tensor  # (V, V) float64: P(next | current), rows sum to 1
    first: torch.Tensor  # (V,) float64: the token after BOS (non-triggers only)
    triggers: torch.Tensor  # (k,) long: the trigger symbols
    symbols: str  # symbol i is the character symbols[i]

    @property
    def n_symbols(self) -> int:
        return self.transition.shape[0]

    @property
    def bos(self) -> int:
        return self.n_symbols

    @property
    def vocab_size(self) -> int:  # the symbols and BOS
        return self.n_symbols + 1

    def is_trigger(self, x: torch.Tensor) -> torch.Tensor:
        """x (...) long -> (...) bool."""
        return torch.isin(x, self.triggers.to(x.device))


def from_text(text: str, k: int) -> BBTask:
    """The BB chain of ``text``'s character bigrams, its ``k`` most frequent characters the triggers."""
    chars = sorted(set(text))
    if k < 1:
        raise ConfigError(f"k={k}: the task needs at least one trigger token")
    if len(chars) < k + 2:
        raise ConfigError(f"the text has {len(chars)} distinct characters: too few for k={k} triggers plus two "
                          "other symbols (give a longer text or fewer triggers)")
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text])
    v = len(chars)
    counts = torch.zeros(v * v, dtype=torch.float64).index_add_(0, ids[:-1] * v + ids[1:],
                                                                 torch.ones(len(ids) - 1, dtype=torch.float64))
    counts = counts.view(v, v)
    unigram = torch.bincount(ids, minlength=v).double()
    unigram /= unigram.sum()
    rows = counts.sum(1, keepdim=True)
    transition = torch.where(rows > 0, counts / rows.clamp_min(1), unigram)  # a row never seen: the unigram
    by_count = Counter(text).most_common(k)
    triggers = torch.tensor([index[c] for c, _ in by_count])
    first = unigram.clone()
    first[triggers] = 0
    return BBTask(transition, first / first.sum(), triggers, "".join(chars))


def sample(task: BBTask, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """(batch, length) long sequences: BOS, then the chain with its copies after every trigger."""
    if length < 3:
        raise ConfigError(f"length={length}: a BB sequence needs at least 3 tokens (BOS, a token, the next)")
    x = torch.empty(batch, length, dtype=torch.long)
    x[:, 0] = task.bos
    x[:, 1] = torch.multinomial(task.first.float(), batch, replacement=True, generator=generator)
    for t in range(1, length - 1):
        nxt = torch.multinomial(task.transition[x[:, t]].float(), 1, generator=generator)[:, 0]  # (B,)
        x[:, t + 1] = torch.where(task.is_trigger(x[:, t]), x[:, t - 1], nxt)
    return x


def bayes_nll(task: BBTask, x: torch.Tensor) -> torch.Tensor:
    """(B, L-1) the expected next-token loss of the task's own predictor at each position of ``x`` (B, L): the
    entropy of the first-token distribution after BOS, 0 after a trigger (the copy is certain), the entropy of
    the bigram row elsewhere. Its mean is the floor of any model's mean loss on the same positions."""
    def entropy(p: torch.Tensor) -> torch.Tensor:
        return -(p * p.clamp_min(1e-300).log()).sum(-1)

    cur = x[:, :-1].cpu()  # (B, L-1) the tokens each next one is predicted from
    h = entropy(task.transition)[cur.clamp_max(task.n_symbols - 1)]  # (B, L-1)
    h = torch.where(task.is_trigger(cur), torch.zeros_like(h), h)
    return torch.where(cur == task.bos, entropy(task.first), h)
