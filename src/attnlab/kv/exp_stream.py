"""``attnlab stream`` as a registered experiment: a text streamed through a model with one KV-cache
policy, beside the dense cache (and, on request, the sliding window with re-computation): perplexity,
KV bytes and decode tokens/s. No claims: it measures."""
from __future__ import annotations

import json
import math

from attnlab.experiments.registry import Result, register
from attnlab.kv.configs import StreamRun

DENSE_CHUNK = 256  # the dense reference's tokens a forward: its scores, not its speed, are what it is for


@register("stream", "streaming perplexity, memory and speed of one KV-cache policy on a model", StreamRun,
          demo=False)
def run_stream(cfg: StreamRun, ctx) -> Result:
    """The policy's stream, the dense one and (on request) the recomputed window: NLL, bytes, speed."""
    from attnlab.core.ledger import copy_bandwidth, ledger
    from attnlab.evals.inputs import load_model, text_ids, with_sink
    from attnlab.evals.streaming import recompute_nll, stream_nll
    from attnlab.kv.cache import PolicyCache, check_sink_slot
    from attnlab.kv.plots import stream_figure
    from attnlab.kv.policies import make_policy
    from attnlab.methods import Context, apply

    methods = cfg.methods_applied()
    kv = next(m for m in methods if m.kind == "kv")
    policy = kv.policy()
    model, tok = load_model(cfg.model, ctx.device)
    ids = with_sink(model, text_ids(tok, cfg.text, cfg.tokens, "--text PATH"))
    check_sink_slot(model, policy)
    cache = kv.cache(model)  # refuses rolling on learned positions, before any work
    runs = {}
    # every cache below runs on the same model as the other methods leave it (quantized, scaled, sparse)
    with apply(model, *[m for m in methods if m.kind != "kv"],
               ctx=Context(tok, ctx.device, None, cfg.model)) as applied:
        with ctx.progress(len(ids) - 1, policy.describe()) as bar:
            runs[policy.describe()] = stream_nll(model, ids, cache, cfg.chunk, bar)
        if cfg.dense:
            with ctx.progress(len(ids) - 1, "dense") as bar:
                runs["dense"] = stream_nll(model, ids, PolicyCache(model, make_policy("full")), DENSE_CHUNK, bar)
        compile_s = {}
        if cfg.compile:
            for label, dec in compiled_decoders(model, policy, kv.positions, len(ids), cfg.compile_wrapper).items():
                runs[label], compile_s[label] = compiled_run(dec, ids, ctx, label)
        if cfg.recompute and isinstance(policy.budget, int):
            with ctx.progress(len(ids) - 1, "recompute") as bar:
                runs[f"recompute window {policy.budget}"] = recompute_nll(model, ids, policy.budget, progress=bar)
        bandwidth = copy_bandwidth(ctx.device)  # measured here, beside the runs it sets the roofline of
        sparse = applied.handle("mlp")  # a SparseMLP, or None
        shares, extra = read_shares(model, methods), sparse.predictor_bytes() if sparse is not None else 0
        n = len(ids) - 1  # the tokens each run feeds, c a forward: n / ceil(n / c) a forward on average
        per_forward = {k: n / math.ceil(n / c) for k, c in ((policy.describe(), cfg.chunk), ("dense", DENSE_CHUNK))}
        lines = {k: ledger(model, r.tokens_per_s, sum(b for _, b in r.kv_bytes) / len(r.kv_bytes), bandwidth, shares,
                           extra, per_forward.get(k, 1))
                 for k, r in runs.items() if r.kv_bytes}  # the recomputed window reads no cache: no line
    stream_figure(ctx, runs, {}, model.config.max_position_embeddings, "stream.png")
    (ctx.out / "nll.json").write_text(json.dumps({k: r.nll.round(5).tolist() for k, r in runs.items()}) + "\n")
    metrics = {"command": ctx.command, "model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()),
               "positions": kv.positions, "chunk": cfg.chunk, "compile_s": compile_s,
               "compile_wrapper": cfg.compile_wrapper if cfg.compile else None,
               "methods": [m.spec() for m in methods],
               "runs": {k: {"ppl": r.ppl, "tokens_per_s": r.tokens_per_s, "late_tokens_per_s": r.late_tokens_per_s,
                            "seconds": r.seconds,
                            "kv_bytes_final": r.kv_bytes[-1][1] if r.kv_bytes else None,
                            "kv_bytes_max": max(v for _, v in r.kv_bytes) if r.kv_bytes else None,
                            "ledger": lines.get(k)}
                        for k, r in runs.items()}}
    summary = "\n".join(f"- {line}" for line in result_lines(metrics["runs"]))
    return Result([], metrics, {"stream.png": "NLL per position (mean over 64-token windows), KV bytes stored and "
                                "decode tokens/s along the stream, one line per cache"}, summary)


def compiled_decoders(model, policy, positions: str, n: int, wrapper: str) -> dict:
    """--compile's decoders, label -> decoder: the full cache's (a static cache of the stream's n positions), and
    the run's own evicting cache's where its steady step compiles (attnlab.kv.steady) and the stream fills it."""
    from attnlab.kv.steady import CompiledPolicyDecode
    from attnlab.models.compiled import CompiledDecode

    decoders = {"full, compiled": CompiledDecode(model, max_len=n, wrapper=wrapper)}
    if policy.steady_step() is None:
        own = CompiledPolicyDecode(model, policy, positions, wrapper)
        if n > own.fills_at():  # else the stream never reaches a steady step: nothing to compile
            decoders[f"{policy.describe()}, compiled"] = own
    return decoders


def compiled_run(dec, ids, ctx, label: str):
    """One stream through a compiled decoder (its step compiled first, untimed): (its StreamResult, the compile's
    seconds)."""
    from attnlab.evals.streaming import decoder_nll

    ids = ids.to(dec.device)
    with ctx.progress(1, f"compiling the decode step of {label} (once)") as bar:  # tens of seconds: 30 layers
        compile_s = dec.warm(ids[None])
        bar.update(1)
    with ctx.progress(len(ids) - 1, label) as bar:
        return decoder_nll(dec, ids, bar), compile_s


def read_shares(model, methods) -> dict:
    """The MLP projections a sparse MLP reads in part, at the share it keeps (mask mode reads them whole)."""
    from attnlab.models import arch

    shares = {}
    for m in methods:
        if m.kind == "mlp" and m.mode != "mask":
            shares.update({p: m.keep for p in arch.mlp_projections(model)})
    return shares


def result_lines(runs: dict) -> list[str]:
    """One line per cache: PPL, tokens/s, the KV bytes it ended with and its bandwidth ledger."""
    lines = []
    for k, r in runs.items():
        kv = f", KV {r['kv_bytes_final'] / 2**20:.1f} MiB" if r["kv_bytes_final"] is not None else ""
        led = r.get("ledger")
        roof = (f"; {led['bytes_per_token'] / 2**20:.1f} MiB read a token, roofline {led['roofline_tokens_per_s']:.1f} "
                f"tokens/s, yield {led['yield']:.0%}") if led else ""
        late = r.get("late_tokens_per_s")
        late = f" ({late:.1f} over the last half)" if late is not None else ""
        lines.append(f"{k}: PPL {r['ppl']:.3f}, {r['tokens_per_s']:.1f} tokens/s{late}{kv}{roof}")
    return lines


