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
and the report are saved in ``--out`` (``PolicyCache.state_dict``): a run stopped there (Ctrl-C, kill)
resumes from its last finished segment with the same command, bit for bit as if never stopped, and its
report is always valid up to ``tokens_done``. A checkpoint dies with its machine, though, and the whole
run outlasts a 3-hour session here; so it also splits into parts that each fit one (a policy each, and
the control), run in any order, on any day, and joined by ``--merge`` (million_report.py). Every part
samples the control's tokens from the same --seed, so a split run's PPLs, ratios and checks equal the
whole run's to the last digit; only the memory differs, each process holding one policy.

    python benchmarks/million_tokens.py --out runs/million-1m         # 1,048,576 tokens: ~4.5 h on 2 AVX2 cores
    python benchmarks/million_tokens.py --policies sinks --no-control --out runs/1m-sinks          # ~1.8 h
    python benchmarks/million_tokens.py --policies sinks+h2o --no-control --out runs/1m-sinks+h2o  # ~1.9 h
    python benchmarks/million_tokens.py --policies '' --out runs/1m-control                        # ~40 min
    python benchmarks/million_tokens.py --merge runs/1m-sinks runs/1m-sinks+h2o runs/1m-control --out runs/million-1m
    python benchmarks/million_tokens.py --tokens 32768 --segment 4096 --samples 8 --check-tokens 2048 --out runs/million
        # the scaled run benchmarks/README.md records (1,357 s on 2 CPU cores)
    python benchmarks/million_tokens.py --out runs/million-1m --redraw  # table and figure again, from the json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from attnlab.core.errors import UsageError
from attnlab.core.io import disk_refusal, write_json
from attnlab.data.sources import read_corpus
from attnlab.evals.inputs import load_model
from attnlab.evals.streaming import recompute_nll, stream_nll
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy

from host import machine, memory_mib, model_name, natural, parser, positive_int  # benchmarks/host.py
from million_report import merge, redraw  # benchmarks/million_report.py

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


def sampled(args, a: int, b: int) -> np.ndarray:
    """The control's tokens in a..b: --samples of them past the first budget, from --seed and the segment
    alone, so a resumed run, and every part of a run split by policy, samples the same ones."""
    rng = np.random.default_rng([args.seed, a])
    lo = max(a, args.budget)
    return np.sort(rng.choice(np.arange(lo, b), min(args.samples, b - lo), replace=False))


def stream_segment(model, ids, a: int, b: int, caches: dict, args, bar) -> dict:
    """Tokens a..b through every policy's cache (scoring a+1..b): per policy a report row (PPL over the
    segment and over its sampled tokens, stored bytes, memory, seconds)."""
    rows, ts = {}, sampled(args, a, b)
    for name, cache in caches.items():
        r = stream_nll(model, ids[a:b + 1], cache, args.chunk, bar)
        rss, peak, trimmed = memory_mib()
        rows[name] = {"tokens": b, "ppl": r.ppl, "sampled_ppl": math.exp(r.nll[ts - a].mean()),
                      "kv_bytes": cache.kv_bytes(), "stored": cache.stored(),
                      "rss_mib": rss, "peak_rss_mib": peak, "trimmed_rss_mib": trimmed,
                      "seconds": r.seconds, "tokens_per_s": r.tokens_per_s}
    return rows


def control(model, ids, a: int, b: int, rows: dict, args) -> dict:
    """Re-computation's PPL at the segment's sampled tokens, and each policy's PPL streamed here at the same
    tokens."""
    ts = sampled(args, a, b)
    rec = recompute_nll(model, ids, args.budget, [int(t) for t in ts], None)
    return {"tokens": b, "positions": ts.tolist(), "recompute_ppl": rec.ppl, "seconds": rec.seconds,
            **{f"{k}_ppl": r["sampled_ppl"] for k, r in rows.items()}}


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


def settings(args) -> dict:
    """What a resumed run must share with the stopped one (where it writes, --redraw and --merge are not
    settings)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
            if k not in ("out", "redraw", "merge")}


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
    try:
        torch.save({**state, "args": settings(args), "caches": {k: c.state_dict() for k, c in state["caches"].items()}},
                   tmp)  # straight to disk: ~140 MiB in memory would show in the peak RSS this run measures
        os.replace(tmp, args.out / CHECKPOINT)
        write_json(args.out / "million_tokens.json", report)
    except (OSError, RuntimeError) as e:  # torch.save wraps the disk's refusal in a RuntimeError
        tmp.unlink(missing_ok=True)
        if (refused := disk_refusal(e)) is None:
            raise
        raise UsageError(f"--out {args.out}: cannot write the checkpoint ({refused.strerror}); free space there and "
                         "run the same command again: it resumes from the last complete checkpoint") from None
    # Drawn by a child process: drawn in this one, matplotlib kept ~6 MiB a segment (the sinks part's RSS
    # after trim), which would read as the stream's memory creeping.
    subprocess.run([sys.executable, str(Path(__file__).with_name("million_report.py")), str(args.out)],
                   stdout=subprocess.DEVNULL, check=False)


def command_line() -> argparse.ArgumentParser:
    ap = parser(__doc__, prog="million_tokens.py")
    ap.add_argument("--model", type=model_name, default="smollm2")
    ap.add_argument("--texts", default=TEXTS, help="corpora, comma-separated, in stream order")
    ap.add_argument("--tokens", type=positive_int, default=1 << 20)
    ap.add_argument("--segment", type=positive_int, default=1 << 16)
    ap.add_argument("--budget", type=positive_int, default=1024)
    ap.add_argument("--chunk", type=positive_int, default=256)
    ap.add_argument("--samples", type=positive_int, default=32, help="re-computed tokens per segment")
    ap.add_argument("--check-tokens", type=positive_int, default=3072)
    ap.add_argument("--policies", default="sinks,sinks+h2o",
                    help="comma-separated; '' streams none (a part of a split run that only re-computes)")
    ap.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                    help="re-compute --samples tokens a segment (the oracle the ratios are to); --no-control for "
                         "a part of a split run whose control runs elsewhere")
    ap.add_argument("--seed", type=natural, default=0)
    ap.add_argument("--out", type=Path, required=True, help="where the report goes; a run stopped there resumes")
    ap.add_argument("--redraw", action="store_true",
                    help="write the table and figure in --out again from its million_tokens.json; stream nothing")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="PART",
                    help="join the --out folders of a run split across processes (by --policies, --no-control) "
                         "into one report in --out; stream nothing")
    return ap


def check(args, fail) -> None:
    """Everything the command line can get wrong, before a model is loaded or a token streamed."""
    if args.out.exists() and not args.out.is_dir():
        fail(f"--out {args.out} is a file: give a folder")
    if args.redraw or args.merge:
        return
    if not (args.policies or args.control):
        fail("nothing to run: name --policies, or keep the control (drop --no-control)")
    if not 0 < args.budget < args.check_tokens <= args.tokens or args.segment <= args.budget:
        fail("need 0 < --budget < --check-tokens <= --tokens and --segment > --budget")
    for name in args.policies:
        try:
            policy_of(name, args)
        except UsageError as e:
            fail(f"--policies {name}: {e}")
    if not all(names := args.texts.split(",")):
        fail(f"--texts {args.texts!r}: name one corpus or more, comma-separated, none empty")
    for name in names:  # read here only to fail now, not after the model has loaded
        read_corpus(name, "texts", "--texts A,B,...")


def main(argv: list[str] | None = None):
    ap = command_line()
    args = ap.parse_args(argv)
    args.policies = [p for p in args.policies.split(",") if p]
    try:
        check(args, ap.error)
        if args.redraw or args.merge:
            return redraw(args.out, ap.error) if args.redraw else merge(args.merge, args.out, ap.error)
        run(args, ap)
    except UsageError as e:  # attnlab's own one-line errors: an unknown model, an empty or missing text
        ap.error(str(e))


def run(args, ap) -> None:
    t0 = time.perf_counter()
    model, tok = load_model(args.model)
    ids, source = corpus_ids(tok, args.texts.split(","), args.tokens + 1)
    state = resume(args, model, ap)
    state["history"].append({"from_token": state["done"], "machine": machine(),
                             "date": time.strftime("%Y-%m-%d %H:%M")})
    n, seconds = len(ids) - 1, state["seconds"]
    per = max(1, len(args.policies))  # a part that only re-computes counts the segments' tokens
    with tqdm(total=n * per, initial=state["done"] * per, desc="stream") as bar:
        for a in range(state["done"], n, args.segment):
            b = min(a + args.segment, n)
            rows = stream_segment(model, ids, a, b, state["caches"], args, bar)
            for name, row in rows.items():
                state["policies"][name].append(row)
            if args.control:
                bar.set_description(f"re-computation, {args.samples} tokens")
                state["control"].append(control(model, ids, a, b, rows, args))
                bar.set_description("stream")
            if not args.policies:
                bar.update(b - a)
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
