"""The runs of ``streameval``, one per (cache, protocol): module-level functions of picklable arguments, so
they run in worker processes (:func:`attnlab.core.workers.in_processes`) or here, one after the other.
Each returns plain data (what metrics.json keeps)."""
from __future__ import annotations

import atexit
import contextlib
from dataclasses import asdict
from functools import lru_cache

from attnlab.core.errors import ConfigError
from attnlab.core.workers import in_processes
from attnlab.evals.inputs import load_model
from attnlab.evals.passkey import PasskeyPrompts, bos_ids, build_prompts, passkey_cases
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.methods import Context, apply
from attnlab.recall.decode import InPlace, Pieces, check_budget, passkey_in_place, run_streameval
from attnlab.recall.streameval import make_stream
from attnlab.recall.xsum import budget_of, repeated_ngrams, rouge, summary_of

_HELD = contextlib.ExitStack()  # the methods entered on the one model this process holds
atexit.register(_HELD.close)  # exited while the interpreter still has its modules


def _model_of(cfg):
    """``cfg``'s model and tokenizer, its methods (``--set methods=...``) entered: loaded once per process."""
    return _model(cfg.model, tuple(cfg.methods))


@lru_cache(maxsize=1)
def _model(name: str, methods: tuple[str, ...] = ()):
    """The model and tokenizer, loaded once per process, ``methods`` entered on it while the process holds it
    (the model is loaded for these runs alone: a new one, and the process's end, release the old)."""
    _HELD.close()
    model, tok = load_model(name)
    if methods:
        _HELD.enter_context(apply(model, *methods, ctx=Context(tok, "cpu", None, name)))
    return model, tok


def _cache(model, policy: str, budget: int | None, cfg):
    if budget is None:
        return None  # the model's own dense cache
    return PolicyCache(model, make_policy(policy, budget, n_sink=cfg.n_sink), cfg.positions)


def stream_job(cfg, policy: str, budget: int | None, progress=None) -> dict:
    model, tok = _model_of(cfg)
    pieces, stream = Pieces(tok, cfg.chat), make_stream(cfg.spec)  # budgets checked once, by validate(), before any job
    run = run_streameval(model, pieces, stream, _cache(model, policy, budget, cfg), cfg.answer_tokens, progress)
    answers = [{**asdict(a.query), "distance": a.query.distance, "answer": a.text, "correct": a.correct,
                "token_distance": a.token_distance, "kept": a.kept} for a in run.answers]
    return {"answers": answers, "tokens": run.ids.numel(), "seconds": run.seconds, "kv_bytes": run.kv_bytes}


def passkey_job(cfg, policy: str, budget: int | None, progress=None) -> dict:
    model, tok = _model_of(cfg)
    cases = passkey_cases([cfg.passkey_length], cfg.passkey_depths, 1, cfg.seed)
    prompts = build_prompts(tok, cases)
    rows = passkey_in_place(model, tok, prompts, lambda: _cache(model, policy, budget, cfg), progress=progress)
    return {"passkey": rows}


def summarise_job(cfg, cache: tuple | None, prompts: list[tuple[int, str, str]], progress=None) -> list[dict]:
    """Each (index, prompt, reference) continued for ``cfg.max_new`` greedy tokens under ``cache`` (None: full;
    else (policy, recent share, n_sink) at ``cfg.ratio`` of the prompt, original positions, as H2O)."""
    model, tok = _model_of(cfg)
    rows = []
    for index, prompt, reference in prompts:
        ids = bos_ids(tok) + tok(prompt, add_special_tokens=False)["input_ids"]
        policy = None
        if cache is not None:
            name, share, n_sink = cache
            budget, recent = budget_of(len(ids), cfg.ratio, share, n_sink)
            policy = PolicyCache(model, make_policy(name, budget, n_sink=n_sink, recent=recent), "original")
        with InPlace(model, policy, progress) as run:
            run.prefill(ids) if policy is None else run.feed(ids)
            out, _ = run.greedy(cfg.max_new)
        if tok.eos_token_id in out:
            out = out[:out.index(tok.eos_token_id)]
        text = tok.decode(out, skip_special_tokens=True)
        summary = summary_of(text) if reference else text.strip()
        scores = rouge(summary, reference) if reference else {}
        rows.append({"index": index, "summary": summary, **scores, "repeated": repeated_ngrams(summary),
                     "prompt_tokens": len(ids)})
    return rows


def validate(cfg) -> None:
    """Refuse, before any stream starts, budgets that cannot hold a query (or the passkey question) beside
    the sinks, and a passkey length too short for its protocol."""
    _, tok = _model_of(cfg)
    if cfg.lines:  # 0: the passkey alone
        pieces, stream = Pieces(tok, cfg.chat), make_stream(cfg.spec)  # chat without a template: refused here
        check_budget(pieces, stream, min(cfg.budgets), cfg.n_sink, cfg.answer_tokens)
    if cfg.passkey_length:
        prompts = PasskeyPrompts(tok)
        if cfg.passkey_length < prompts.min_length():
            raise ConfigError(f"passkey_length={cfg.passkey_length}: the protocol needs >= {prompts.min_length()} "
                              "tokens")
        if cfg.passkey_budget < cfg.n_sink + len(prompts.question) + 10:
            raise ConfigError(f"passkey_budget={cfg.passkey_budget} cannot hold {cfg.n_sink} sinks, the question "
                              f"({len(prompts.question)} tokens) and the answer: use >= "
                              f"{cfg.n_sink + len(prompts.question) + 10}")


def call(job: tuple):
    """(fn, *args) -> fn(*args): what a worker process runs."""
    fn, *args = job
    return fn(*args)


def run_jobs(jobs: dict[str, tuple], workers: int, bar) -> dict:
    """{name: fn(*args)} for ``jobs`` {name: (fn, *args)}: here, one after the other, when ``workers`` <= 1
    (the model loads once), else ``workers`` at once in worker processes."""
    if workers > 1:
        return in_processes(call, {k: (v,) for k, v in jobs.items()}, workers, bar)
    out = {}
    for name, job in jobs.items():
        out[name] = call(job)
        bar.update(1)
    return out
