"""A view from a loaded model and token ids: capture, replay every policy, render. What ``attnlab view``,
``attnlab probe`` and the ``probes`` experiment share."""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch

from attnlab.core.errors import UsageError
from attnlab.core.io import write_atomic
from attnlab.kv.cache import check_sink_slot
from attnlab.kv.policies import KVPolicy
from attnlab.kv.rows import same_capacity
from attnlab.models import arch
from attnlab.view.capture import capture
from attnlab.view.defaults import DEFAULT_BUDGET, DEFAULT_CHUNK, DEFAULT_POLICIES, MAX_TOKENS, VIEW_FILE
from attnlab.view.page import page_data, render
from attnlab.view.replay import policies_for, replay


def context_of(model: torch.nn.Module) -> int | None:
    """The longest input the model was trained for (its config's), None if it states none."""
    config = model.config.get_text_config(decoder=True)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def check_tokens(model: torch.nn.Module, tokens: int) -> None:
    """One line when ``tokens`` is outside 1 .. min(MAX_TOKENS, the model's context)."""
    limit = min(MAX_TOKENS, context_of(model) or MAX_TOKENS)
    if not 1 <= tokens <= limit:
        why = "the model's context" if limit < MAX_TOKENS else "what one page holds"
        raise UsageError(f"--tokens {tokens}: give 1 to {limit} ({why})")


def usable(model: torch.nn.Module, policies: list[KVPolicy], named: bool) -> list[KVPolicy]:
    """The policies to replay: a model pre-trained with a sink token refuses those that would evict it, an
    error when the user named them, quietly dropped from the defaults."""
    if named:
        for p in policies:
            check_sink_slot(model, p)
        return policies
    out = []
    for p in policies:
        try:
            check_sink_slot(model, p)
            out.append(p)
        except UsageError:
            pass
    return out


def build_view(model: torch.nn.Module, tok, ids: torch.Tensor, policies: list[KVPolicy], chunk: int,
               info: dict, progress=None, n_sink: int = 4) -> str:
    """The page for ids (T,): ``info`` says what was run (model, text); ``progress(total, desc)`` makes a
    bar (``RunContext.progress``), or None."""
    def bar(total: int, desc: str):
        return progress(total, desc) if progress else nullcontext()

    with bar(arch.dims(model).n_layers, "attention") as b:
        cap = capture(model, ids, n_sink, b)
    with bar(ids.numel() * len({same_capacity(p) for p in policies}), f"replay {len(policies)} policies") as b:
        replays = replay(model, ids, policies, chunk, b)
    tokens = [tok.decode([int(i)]) for i in ids]
    return render(page_data(tokens, ids.tolist(), cap, replays, {**info, "chunk": chunk}))


def write_view(model: torch.nn.Module, tok, ids: torch.Tensor, out: Path, info: dict, tokens: int,
               progress=None) -> dict[str, str]:
    """The page of the first ``tokens`` of ids (T,), default policies, budget and chunk, as ``out``/view.html:
    {file: what it is}, a Result's links ({} for tokens=0)."""
    limit = min(tokens, MAX_TOKENS, context_of(model) or MAX_TOKENS)
    if limit < 1:
        return {}
    ids = ids[:limit]
    policies = usable(model, policies_for(DEFAULT_POLICIES, (DEFAULT_BUDGET,), 4), named=False)
    write_atomic(out / VIEW_FILE, build_view(model, tok, ids, policies, DEFAULT_CHUNK, info, progress))
    return {VIEW_FILE: f"attention view of the first {ids.numel()} tokens (attnlab view)"}
