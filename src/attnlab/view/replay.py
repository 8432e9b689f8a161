"""Eviction replay: a text streamed through the model with a policy's evicting KV cache (the real one,
:class:`attnlab.kv.cache.PolicyCache`), and what it stores after every step, per layer and KV head.

A step is one forward of ``chunk`` tokens, as in ``attnlab stream``: before storing a step's tokens the cache
evicts down to the budget, so after step s it holds the tokens the step's queries read (the budget's kept
tokens and the step's own). ``chunk=1`` is decoding one token at a time, the papers' protocol; a larger chunk
is faster and evicts between chunks (the step's queries see up to budget + chunk - 1 tokens)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.kv.cache import PolicyCache, check_sink_slot
from attnlab.kv.policies import KVPolicy, make_policy
from attnlab.kv.rows import RowPolicies, same_capacity


@dataclass
class Replay:
    policy: str  # the registry's name
    budget: int | float
    label: str  # how the budget is split, for the page
    ends: list[int]  # after each step, the tokens seen
    kept: torch.Tensor  # (steps, L, H_kv, T) bool: stored after each step


def policies_for(names: tuple[str, ...], budgets: tuple[float, ...], n_sink: int) -> list[KVPolicy]:
    """Every named policy at every budget (one-line errors for an unknown name or an impossible budget)."""
    out = []
    for name in names:
        for b in budgets:
            policy = make_policy(name, b, n_sink=n_sink)
            if policy not in out:  # a policy that ignores the budget ("full") once
                out.append(policy)
    return out


@torch.no_grad()
def replay(model: torch.nn.Module, ids: torch.Tensor, policies: list[KVPolicy], chunk: int,
           progress=None) -> list[Replay]:
    """Stream ids (T,) through ``model`` with each policy's cache, ``chunk`` tokens a step. Policies that keep
    as many slots run as the rows of one batch (:class:`RowPolicies`): one forward per step for all of them."""
    groups: dict[tuple, list[KVPolicy]] = {}
    for p in policies:
        check_sink_slot(model, p)
        groups.setdefault(same_capacity(p), []).append(p)
    done = {}
    for group in groups.values():
        ends, kept = _stream(model, ids, RowPolicies(rows=tuple(group)), chunk, progress)
        for b, p in enumerate(group):
            done[p] = Replay(p.name, p.budget if p.budget is not None else ids.numel(), _label(p), ends, kept[:, b])
    return [done[p] for p in policies]


def _stream(model, ids: torch.Tensor, rows: RowPolicies, chunk: int, progress) -> tuple[list[int], torch.Tensor]:
    """(the tokens seen after each step, kept (steps, B, L, H_kv, T) bool) for one batch of rows."""
    t, b = ids.numel(), len(rows.rows)
    batch = ids[None].expand(b, t).to(model.device)
    ends, kept = [], []
    with PolicyCache(model, rows) as cache:
        for start in range(0, t, chunk):
            model(batch[:, start:start + chunk], past_key_values=cache, use_cache=True)
            ends.append(min(start + chunk, t))
            kept.append(torch.stack([cache.kept_mask(i, t) for i in range(len(cache.layers))], 1).cpu())  # (B, L, H, T)
            if progress is not None:
                progress.update(ends[-1] - start)
    return ends, torch.stack(kept)


def _label(p: KVPolicy) -> str:
    """How the page names a replay: how a token budget is split, or the policy and its fraction."""
    return p.label() if p.budget is None or isinstance(p.budget, int) else p.describe()
