"""A long stream at constant memory: StreamingLLM's "4M tokens" property, scaled to this machine.

The local corpora (``--texts``, concatenated with their line breaks; repeated from the start only if
they run out, and the report says how many tokens were repeats) stream through the model in chunks
of ``--chunk`` tokens with sinks 4 + window 1,020 and with sinks+h2o (4 sinks + 508 heavy + 512
recent) at the same budget, rolling positions. Per ``--segment`` tokens it records the perplexity,
the cache's stored bytes and the process's resident and peak memory. Stretches of text differ in
difficulty, so "flat" is judged against StreamingLLM's oracle on the same tokens: the sliding window
with re-computation (each scored token sees its previous ``budget`` tokens re-encoded from scratch),
at ``--samples`` random tokens of every segment.

Two checks say what the shortcuts change:
- chunking: the first ``--check-tokens`` tokens are also streamed token by token (the papers'
  protocol). In a chunk, eviction happens between chunks, so a chunk's tokens see up to
  budget + chunk - 1 earlier tokens;
- positions: rolling positions keep the model's own (growing) position for new tokens and rotate
  kept keys; the same ``--check-tokens`` tokens are streamed as if met at position ``--tokens``
  (``PolicyCache(start=...)``), so fp32 RoPE angles that far out are tested without streaming there.

Segments go one at a time through every policy and the control, and after each one the caches, the rows
and the report are saved in ``--out`` (``PolicyCache.state_dict``): a run stopped there (Ctrl-C, kill, the
end of a session) resumes from its last finished segment with the same command, bit for bit as if never
stopped, and its report is always valid up to ``tokens_done``.

    python benchmarks/million_tokens.py --out runs/million-1m         # 1,048,576 tokens: ~5.5 h on 2 AVX2 cores
    python benchmarks/million_tokens.py --tokens 32768 --segment 4096 --samples 8 --check-tokens 2048 --out runs/million
        # the scaled run benchmarks/README.md records (1,357 s on 2 CPU cores)
    python benchmarks/million_tokens.py --out runs/million-1m --redraw  # table and figure again, from the json
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from attnlab.core.io import write_atomic, write_json
from attnlab.core.plotting import plt
from attnlab.data.sources import CorpusNotFound, read_corpus
from attnlab.evals.inputs import load_model
from attnlab.evals.streaming import recompute_nll, stream_nll
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy

from host import machine, memory_mib  # benchmarks/host.py

CHECKPOINT = "checkpoint.pt"  # the caches and rows after the last finished segment
TEXTS = "kjv/kjv.txt,war-and-peace/warpeace.txt,wikitext-2/test.txt,wikitext-2/valid.txt,tinyshakespeare/input.txt"


def corpus_ids(tok, texts: list[str], tokens: int) -> tuple[torch.Tensor, dict]:
    """The first ``tokens`` ids (T,) of the texts one after another, cycling if they run out; what was used."""
    ids, used = [], {}
    for name in texts:
        lines = read_corpus(name, "texts", "--texts A,B,...")
        for i in range(0, len(lines), 2000):
            if len(ids) >= tokens:
                break
            piece = tok("".join(line + "\n" for line in lines[i:i + 2000]), add_special_tokens=False)["input_ids"]
            piece = piece[:tokens - len(ids)]
            ids += piece
            used[name] = used.get(name, 0) + len(piece)
    unique = len(ids)
    while len(ids) < tokens:
        ids += ids[:min(unique, tokens - len(ids))]
    return torch.tensor(ids[:tokens]), {"tokens_per_text": used, "repeated_tokens": max(0, tokens - unique)}


def policy_of(name: str, args):
    return make_policy(name, budget=args.budget, n_sink=4, recent=args.budget // 2 if name == "sinks+h2o" else None)


def stream_segment(model, ids, a: int, b: int, caches: dict, args, bar) -> tuple[dict, dict]:
    """Tokens a..b through every policy's cache (scoring a+1..b): per policy the NLL (b-a,) and a report row
    (PPL, stored bytes, memory, seconds)."""
    nll, rows = {}, {}
    for name, cache in caches.items():
        r = stream_nll(model, ids[a:b + 1], cache, args.chunk, bar)
        rss, peak, trimmed = memory_mib()
        nll[name] = r.nll
        rows[name] = {"tokens": b, "ppl": r.ppl, "kv_bytes": cache.kv_bytes(), "stored": cache.stored(),
                      "rss_mib": rss, "peak_rss_mib": peak, "trimmed_rss_mib": trimmed,
                      "seconds": r.seconds, "tokens_per_s": r.tokens_per_s}
    return nll, rows


def control(model, ids, a: int, b: int, nll: dict, args, bar) -> dict:
    """Re-computation's PPL at tokens sampled in a..b (its own seed per segment, so a resumed run samples the
    same), and each policy's PPL at the same tokens."""
    rng = np.random.default_rng([args.seed, a])
    lo = max(a, args.budget)
    ts = np.sort(rng.choice(np.arange(lo, b), min(args.samples, b - lo), replace=False))
    rec = recompute_nll(model, ids, args.budget, [int(t) for t in ts], bar)
    return {"tokens": b, "positions": ts.tolist(), "recompute_ppl": rec.ppl, "seconds": rec.seconds,
            **{f"{k}_ppl": math.exp(v[ts - a].mean()) for k, v in nll.items()}}


def checks(model, ids, args) -> dict:
    """PPL past the fill on the first check tokens: chunked vs token by token, and met at position --tokens."""
    part, out = ids[:args.check_tokens], {}
    for name in args.policies:
        ppl = {}
        for label, chunk, start in (("chunked", args.chunk, 0), ("token by token", 1, 0),
                                    (f"chunked, from position {args.tokens}", args.chunk, args.tokens)):
            with tqdm(total=len(part) - 1, desc=f"check {name}: {label}") as bar:
                r = stream_nll(model, part, PolicyCache(model, policy_of(name, args), "rolling", start), chunk, bar)
            ppl[label] = r.ppl_of(args.budget)
        out[name] = ppl
    return out


def figure(policies: dict, ctrl: list[dict], path) -> None:
    """PPL per segment; the stream's PPL over re-computation's on the same sampled tokens (the measure of
    "flat", since stretches of text differ in difficulty); the cache's bytes; the process's memory."""
    fig, ax = plt.subplots(1, 4, figsize=(20, 3.8), layout="constrained")
    x = [r["tokens"] for r in ctrl]
    ax[0].plot(x, [r["recompute_ppl"] for r in ctrl], "k-x", label="re-computation (sampled tokens)")
    ax[1].axhline(1.0, color="k", lw=0.8, label="= re-computation")
    for i, (name, rows) in enumerate(policies.items()):
        ax[0].plot([r["tokens"] for r in rows], [r["ppl"] for r in rows], "-o", color=f"C{i}", label=f"{name} (all)")
        ax[1].plot(x, [r[f"{name}_ppl"] / r["recompute_ppl"] for r in ctrl], "-o", color=f"C{i}", label=name)
        ax[2].plot([r["tokens"] for r in rows], [r["kv_bytes"] / 2**20 for r in rows], "-o", label=name)
        ax[3].plot([r["tokens"] for r in rows], [r["peak_rss_mib"] for r in rows], "-o", label=f"{name}: peak")
        ax[3].plot([r["tokens"] for r in rows], [r["rss_mib"] for r in rows], ":", color=f"C{i}", label=f"{name}: now")
        ax[3].plot([r["tokens"] for r in rows], [r.get("trimmed_rss_mib", math.nan) for r in rows], "--x",
                   color=f"C{i}", label=f"{name}: after malloc_trim")
    ax[0].set(xlabel="tokens streamed", ylabel="PPL per segment", title="perplexity", yscale="log")
    ax[1].set(xlabel="tokens streamed", ylabel="PPL / re-computation's", ylim=(0, None),
              title="against re-computation, same sampled tokens")
    ax[2].set(xlabel="tokens streamed", ylabel="KV cache (MiB)", title="stored keys and values", ylim=(0, None))
    ax[3].set(xlabel="tokens streamed", ylabel="MiB", title="process memory (RSS)", ylim=(0, None))
    for a in ax:
        a.legend(fontsize=7)
        a.xaxis.set_major_formatter(lambda v, _: f"{v / 1000:,.0f}k")  # 1,048,576 tokens: labels would collide
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)  # one figure per segment: don't keep them all


def table(report: dict) -> str:
    """The report as a Markdown table, a row per segment: PPL per policy, the control on the sampled tokens
    and each policy's ratio to it there, the stored bytes, and the process's RSS (one process streams every
    policy, so RSS is the process's, not a policy's)."""
    names = list(report["policies"])
    head = (["tokens streamed"] + [f"{n} PPL" for n in names] + ["re-computation (sampled)"]
            + [f"{n} / re-comp." for n in names]
            + ["KV MiB (" + " / ".join(names) + ")", "RSS MiB", "after malloc_trim", "peak RSS MiB"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, c in enumerate(report["control"]):
        rows = [report["policies"][n][i] for n in names]
        cells = ([f"{c['tokens']:,}"] + [f"{r['ppl']:.2f}" for r in rows] + [f"{c['recompute_ppl']:.2f}"]
                 + [f"{c[n + '_ppl'] / c['recompute_ppl']:.2f}" for n in names]
                 + [" / ".join(f"{r['kv_bytes'] / 2**20:.0f}" for r in rows)]
                 + [_mib(max(r.get(k, math.nan) for r in rows))
                    for k in ("rss_mib", "trimmed_rss_mib", "peak_rss_mib")])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _mib(v: float) -> str:
    return "not recorded" if math.isnan(v) else f"{v:,.0f}"


def settings(args) -> dict:
    """What a resumed run must share with the stopped one (where it writes and --redraw are not settings)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("out", "redraw")}


def resume(args, model, ap) -> dict:
    """The run's state: a fresh one, or the one saved in --out after its last finished segment."""
    caches = {name: PolicyCache(model, policy_of(name, args), "rolling") for name in args.policies}
    path = args.out / CHECKPOINT
    if not path.exists():
        return {"caches": caches, "done": 0, "seconds": 0.0, "history": [],
                "policies": {name: [] for name in args.policies}, "control": []}
    try:  # weights_only: tensors, numbers, strings and containers, nothing executed on load
        saved = torch.load(path, weights_only=True)
        if not isinstance(saved, dict) or not {"args", "caches", "done"} <= saved.keys():
            raise KeyError("not this benchmark's checkpoint")
    except Exception as e:  # a truncated or foreign file: say so, touch nothing
        ap.error(f"{path} is not a readable checkpoint ({type(e).__name__}): move it away to start over, "
                 "or give a new --out")
    now = settings(args)
    if saved["args"] != now:
        diff = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in saved["args"].items() if now.get(k) != v)
        ap.error(f"{args.out} holds a run with other settings: resume it with {diff}, or give a new --out")
    for name, cache in caches.items():
        cache.load_state_dict(saved["caches"][name])
    print(f"resuming from token {saved['done']:,} of {args.tokens:,}")
    return {**saved, "caches": caches}


def report_of(state: dict, source: dict, args) -> dict:
    """What million_tokens.json says: complete once the checks have run after the last segment."""
    return {"args": settings(args), **source, "tokens_done": state["done"],
            "complete": "checks" in state, **{k: state[k] for k in ("seconds", "history", "policies", "control")},
            "checks": state.get("checks")}


def save(state: dict, report: dict, args) -> None:
    """Checkpoint, report and figure, each written aside and renamed: an interrupted run loses at most a segment."""
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / (CHECKPOINT + ".tmp")
    torch.save({**state, "args": settings(args), "caches": {k: c.state_dict() for k, c in state["caches"].items()}},
               tmp)  # straight to disk: ~140 MiB in memory would show in the peak RSS this run measures
    os.replace(tmp, args.out / CHECKPOINT)
    write_json(args.out / "million_tokens.json", report)
    draw(report, args.out)


def draw(report: dict, out: Path) -> None:
    """million_tokens.md and .png from the report (each written aside and renamed)."""
    png = io.BytesIO()
    write_atomic(out / "million_tokens.md", table(report))
    figure(report["policies"], report["control"], png)
    write_atomic(out / "million_tokens.png", png.getvalue())


def redraw(out: Path, ap) -> None:
    """--redraw: the table and figure again from million_tokens.json, as measured; nothing streamed."""
    try:
        report = json.loads((out / "million_tokens.json").read_text())
    except (OSError, ValueError) as e:
        ap.error(f"{out / 'million_tokens.json'}: {type(e).__name__}; --redraw needs a run's report in --out")
    draw(report, out)
    print(f"redrawn: {out / 'million_tokens.md'}, {out / 'million_tokens.png'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--texts", default=TEXTS, help="corpora, comma-separated, in stream order")
    ap.add_argument("--tokens", type=int, default=1 << 20)
    ap.add_argument("--segment", type=int, default=1 << 16)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--samples", type=int, default=32, help="re-computed tokens per segment")
    ap.add_argument("--check-tokens", type=int, default=3072)
    ap.add_argument("--policies", default="sinks,sinks+h2o")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="where the report goes; a run stopped there resumes")
    ap.add_argument("--redraw", action="store_true",
                    help="write the table and figure in --out again from its million_tokens.json; stream nothing")
    args = ap.parse_args()
    if args.redraw:
        return redraw(args.out, ap)
    args.policies = args.policies.split(",")
    if not 0 < args.budget < args.check_tokens <= args.tokens or args.segment <= args.budget:
        ap.error("need 0 < --budget < --check-tokens <= --tokens and --segment > --budget")
    t0 = time.perf_counter()
    model, tok = load_model(args.model)
    try:
        ids, source = corpus_ids(tok, args.texts.split(","), args.tokens + 1)
    except CorpusNotFound as e:
        ap.error(str(e))
    state = resume(args, model, ap)
    state["history"].append({"from_token": state["done"], "machine": machine(),
                             "date": time.strftime("%Y-%m-%d %H:%M")})
    n, seconds = len(ids) - 1, state["seconds"]
    with tqdm(total=n * len(args.policies), initial=state["done"] * len(args.policies), desc="stream") as bar:
        for a in range(state["done"], n, args.segment):
            b = min(a + args.segment, n)
            nll, rows = stream_segment(model, ids, a, b, state["caches"], args, bar)
            for name, row in rows.items():
                state["policies"][name].append(row)
            bar.set_description(f"re-computation, {args.samples} tokens")
            state["control"].append(control(model, ids, a, b, nll, args, None))
            bar.set_description("stream")
            state["done"], state["seconds"] = b, seconds + time.perf_counter() - t0
            save(state, report_of(state, source, args), args)
    if "checks" not in state:
        state["checks"] = checks(model, ids, args)
    state["seconds"] = seconds + time.perf_counter() - t0
    report = report_of(state, source, args)
    save(state, report, args)
    print(json.dumps({k: report[k] for k in ("seconds", "history", "repeated_tokens", "checks")}, indent=1))

if __name__ == "__main__":
    main()
