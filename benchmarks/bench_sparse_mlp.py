"""Sparse MLP speed: one layer's MLP (dense vs sparse layouts) and SmolLM2's decode, side by side in one run.

(a) Kernel: one SwiGLU MLP with random weights at SmolLM2's size (576 x 1536) and Llama-2-7B's
(4096 x 11008), batch 1 and 8, keep 50/35/25% of the neurons: dense; ``gather`` (SparseMLP's layout:
``index_select`` of the kept rows of W_gate and W_up every step, W_down^T's rows summed in place by
``embedding_bag`` at batch 1, PowerInfer's axpy); CATS's gather (the dense gate decides, then only the
kept rows of W_up and W_down^T); pre-gathered contiguous rows (a static set, copied once: the layout's
upper bound); the active-set cache (``ActiveSet``) fed sets whose consecutive overlap is the one
measured on SmolLM2 (full mode adds 0.5 and 0.9). At batch 8 the step's set (the union of the rows'
sets) has the keep fraction's size. "cold": the timing cycles through as many copies of the layer as
fill 512 MiB, so every call reads its weights from memory, as decode does (SmolLM2's 30 MLPs are
318 MB); "hot": one layer called over and over, its weights cache-resident (a flattering dense).
(b) End to end on SmolLM2: tokens/s of transformers' dense decode, of the same decode with every MLP
returning zeros (the Amdahl ceiling), and of SparseMLP decode (i) with the oracle's sets *given*:
computed beforehand from the dense model's h on the same tokens and replayed by a rule, so choosing the
set is not timed; (ii) with Deja Vu's predictor (rank --rank, from the layer's own input) choosing the
set inside the timed step: its cost included (untrained weights: the timing depends on its shape);
(iii) with CATS choosing from the dense gate, its thresholds calibrated on KJV.

The variants take turns (round-robin), repeated; figures are medians.

    python benchmarks/bench_sparse_mlp.py --quick          # ~4 minutes on the 2-core CPU
    python benchmarks/bench_sparse_mlp.py                  # full: more repeats, batch 8 end to end, overlap sweep
"""
from __future__ import annotations

import contextlib
import math
import re
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache

from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.sparsity.gather import ActiveSet, Scratch, rows_linear, rows_matmul
from attnlab.sparsity.mlp import DENSE_ABOVE, SparseMLP
from attnlab.sparsity.rules import keep_count, topk_mask
from attnlab.sparsity.speed import amdahl, no_mlp

from host import add_out, device, fraction, model_name, parser, positive_int, recorded  # benchmarks/host.py

KEEPS = (0.5, 0.35, 0.25)
SIZES = {"SmolLM2 576x1536": (576, 1536), "Llama-2-7B 4096x11008": (4096, 11008)}
COLD_BYTES = 512 * 2 ** 20  # the cold timing's layers together: far beyond any last-level cache


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def round_robin(fns: dict, repeats: int, inner: int, device: str) -> dict[str, float]:
    """Call each fn ``inner`` times in turn, ``repeats`` rounds: {name: median seconds per call}."""
    times = {k: [] for k in fns}
    for r in range(repeats + 1):  # round 0 warms up
        for name, fn in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            _sync(device)
            if r:
                times[name].append((time.perf_counter() - t0) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def set_walk(n: int, k: int, overlap: float, steps: int, device: str, seed: int = 0) -> list[torch.Tensor]:
    """``steps`` bool (n,) masks of k neurons, each sharing round(overlap * k) neurons with the previous."""
    g = torch.Generator().manual_seed(seed)
    cur = torch.randperm(n, generator=g)[:k]
    out = []
    for _ in range(steps):
        keep = torch.zeros(n, dtype=torch.bool)
        keep[cur] = True
        out.append(keep.to(device))
        stay = cur[torch.randperm(k, generator=g)[:round(overlap * k)]]
        outside = (~keep).nonzero().squeeze(1)
        cur = torch.cat([stay, outside[torch.randperm(outside.numel(), generator=g)[:k - stay.numel()]]])
    return out


class Layers:
    """``copies`` SwiGLU MLPs of one size with random weights, in every layout a variant reads. Decode reads
    each layer's weights once per token and the model's MLPs together far exceed the CPU's last-level
    cache, so a timing that calls one layer over and over (its weights cache-resident) flatters dense;
    cycling through copies whose bytes together exceed any cache times them as decode meets them."""

    def __init__(self, d: int, n: int, copies: int, device: str, first: torch.Tensor):
        g = torch.Generator().manual_seed(0)
        self.gate, self.up, self.down, self.down_t, self.pre = [], [], [], [], []
        for _ in range(copies):
            gate, up = (nn.Linear(d, n, bias=False) for _ in range(2))
            for lin in (gate, up):
                lin.weight = nn.Parameter((torch.randn(n, d, generator=g) / d ** 0.5).to(device), requires_grad=False)
            down = (torch.randn(d, n, generator=g) / n ** 0.5).to(device)  # (d, n): W_down, as the model holds it
            down_t = down.T.contiguous()  # (n, d): the transposed copy SparseMLP makes once
            self.gate.append(gate), self.up.append(up), self.down.append(down), self.down_t.append(down_t)
            self.pre.append(ActiveSet((gate.weight, up.weight), down_t))
            self.pre[-1].update(first)  # pre-gathered: the first set, copied once


def kernel_variants(d: int, n: int, batch: int, keep: float, copies: int, overlaps: list[float], device: str) -> dict:
    """The MLP of one layer, each layout as a step function of (copy i, token step s)."""
    k = keep_count(n, keep)
    walks = {o: set_walk(n, k, o, 64, device) for o in overlaps}
    rows = [m.nonzero().squeeze(1) for m in walks[overlaps[0]]]  # (k,) each
    lay = Layers(d, n, copies, device, walks[overlaps[0]][0])
    x = torch.randn(batch, d, generator=torch.Generator().manual_seed(1)).to(device)  # (B, d)
    scratch = Scratch()  # SparseMLP's one buffer for the copied rows

    def dense(i, s):
        return F.linear(F.silu(lay.gate[i](x)) * lay.up[i](x), lay.down[i])  # (B, d)

    def gather(i, s):  # SparseMLP(mode="gather"): index_select W_gate, W_up rows; W_down^T rows summed (batch 1)
        r = rows[s % len(rows)]
        h = F.silu(rows_linear(x, lay.gate[i], r, scratch)) * rows_linear(x, lay.up[i], r, scratch)  # (B, k)
        return rows_matmul(h, lay.down_t[i], r, None, scratch)  # (B, d)

    def cats(i, s):  # CATS: the dense gate decides; only the kept rows of W_up and W_down^T are read
        r = rows[s % len(rows)]
        a = F.silu(lay.gate[i](x))  # (B, n)
        return rows_matmul(a.index_select(1, r) * rows_linear(x, lay.up[i], r, scratch),
                           lay.down_t[i], r, None, scratch)

    def cached(c: ActiveSet, mask=None):
        if mask is not None:
            c.update(mask)
        y = c.forward_in(x)  # (B, k, 2)
        return c.forward_out(F.silu(y[..., 0]) * y[..., 1], None)  # (B, d)

    fns = {"dense": dense, "gather": gather, "CATS gather (dense gate)": cats,
           "pre-gathered (static set)": lambda i, s: cached(lay.pre[i])}
    for o, walk in walks.items():
        caches = [ActiveSet((lay.gate[i].weight, lay.up[i].weight), lay.down_t[i]) for i in range(copies)]
        fns[f"cache o={o:.2f}"] = lambda i, s, c=caches, w=walk: cached(c[i], w[s % len(w)])
    return fns


def bench_kernel(args, overlaps: list[float]) -> list[dict]:
    """Per size, batch and keep: {variant: median seconds per layer per token}, hot (one layer) and cold."""
    out = []
    for size, (d, n) in SIZES.items():
        layer_bytes = 3 * d * n * 4
        cold = max(1, math.ceil(COLD_BYTES / layer_bytes))
        for where, copies in ((("hot", 1), ("cold", cold)) if n < 4000 else (("cold", cold),)):
            for batch in (1, 8):
                for keep in KEEPS:
                    fns = kernel_variants(d, n, batch, keep, copies, overlaps, args.device)
                    steps = max(2, 40 // copies) if n < 4000 else 6  # tokens per timing: every copy once per token
                    layer_steps = {name: (lambda f=f: [f(i, s) for s in range(steps) for i in range(copies)])
                                   for name, f in fns.items()}
                    with torch.no_grad():
                        t = round_robin(layer_steps, args.repeats, 1, args.device)
                    t = {k: v / (steps * copies) for k, v in t.items()}
                    out.append({"size": f"{size} {where}", "batch": batch, "keep": keep, **t})
                    print(f"  {size} {where} ({copies} layers) batch {batch} keep {keep:.0%}: "
                          + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in t.items()), flush=True)
    return out


class Given:
    """A rule replaying precomputed neuron sets token by token: masks[layer] (B, T, n) bool."""

    name, needs = "given", "input"

    def __init__(self, masks: dict[int, torch.Tensor]):
        self.masks, self.pos = masks, {}

    def mask(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """x (..., d) of the next t tokens of each of the B rows -> their masks (..., n)."""
        m = self.masks[layer]
        t = x.numel() // x.shape[-1] // m.shape[0]
        p = self.pos.get(layer, 0)
        self.pos[layer] = p + t
        return m[:, p:p + t].reshape(*x.shape[:-1], m.shape[-1])


@torch.no_grad()
def oracle_masks(model, ids: torch.Tensor, keeps) -> tuple[dict, dict]:
    """Per keep the dense model's oracle sets {layer: (B, T, n) bool}, and per keep the mean share of a
    token's set also in the next token's (over layers and rows), with its lowest and highest layer."""
    with Trace(model, "blocks.*.mlp.post") as tr:
        model(ids)
    n_layers = len(arch.layers(model))
    masks, overlap = {}, {}
    for keep in keeps:
        masks[keep] = {i: topk_mask(tr[f"blocks.{i}.mlp.post"].abs(), keep) for i in range(n_layers)}
        per_layer = [(m[:, 1:] & m[:, :-1]).sum(-1).float().mean() / m[0, 0].sum() for m in masks[keep].values()]
        per_layer = torch.stack(per_layer)  # (L,)
        overlap[keep] = (float(per_layer.mean()), float(per_layer.min()), float(per_layer.max()))
    return masks, overlap


@torch.no_grad()
def decode_steps(model, ids: torch.Tensor, prefill: int, context, device: str) -> list[float]:
    """Prefill ``prefill`` tokens, then decode the rest of ``ids`` (B, T) one step at a time: seconds per step."""
    times = []
    with context():
        cache = DynamicCache(config=model.config)
        model(ids[:, :prefill], past_key_values=cache, use_cache=True)
        for s in range(prefill, ids.shape[1]):
            _sync(device)
            t0 = time.perf_counter()
            model(ids[:, s:s + 1], past_key_values=cache, use_cache=True)
            _sync(device)
            times.append(time.perf_counter() - t0)
    return times[2:]  # the first steps shrink the prefill's union of sets: warm-up


def e2e_variants(model, masks: dict, rules: dict, args) -> dict:
    """Name -> a fresh context for one decode (fresh rules: the given sets replay from token 0)."""
    out = {"dense (transformers)": contextlib.nullcontext, "MLP skipped (ceiling)": lambda: no_mlp(model)}
    for keep, m in masks.items():
        for mode in args.layouts if keep == KEEPS[0] else ("gather",):
            out[f"{mode} keep {keep:.0%}, oracle set given"] = (
                lambda m=m, mode=mode: SparseMLP(model, Given(m), mode=mode))
        for name, rule in rules.get(keep, {}).items():
            out[f"gather keep {keep:.0%}, {name}"] = lambda rule=rule: SparseMLP(model, rule, mode="gather")
    return out


def chosen_rules(model, calib: torch.Tensor, keeps, rank: int) -> dict:
    """Per keep the rules whose choice is timed with the decode: Deja Vu's predictor (own input, rank
    ``rank``; untrained weights, as the timing depends on its shape, not its accuracy) and CATS (its
    thresholds calibrated on ``calib``: the dense gate decides)."""
    from attnlab.sparsity.measure import rule_builder
    from attnlab.sparsity.predicted import Predicted
    from attnlab.sparsity.predictors import new_predictors

    cats = rule_builder(model, "cats", calib, window=calib.numel())
    return {keep: {f"predictor r={rank} (cost included)":
                   Predicted(keep, own=new_predictors(model, "bench", rank, keep, "own")),
                   "CATS (dense gate; cost included)": cats(keep)} for keep in keeps}


def bench_e2e(args, model, ids: torch.Tensor, masks: dict, rules: dict) -> dict[str, float]:
    """Each variant decodes the same tokens in turn, ``repeats`` rounds: {name: median s per step}."""
    variants = e2e_variants(model, masks, rules, args)
    times = {k: [] for k in variants}
    for r in range(args.repeats):
        for name, ctx in variants.items():
            times[name] += decode_steps(model, ids, args.prefill, ctx, args.device)
        print(f"  round {r + 1}/{args.repeats}: " + ", ".join(
            f"{k} {statistics.median(v) * 1e3:.1f} ms" for k, v in times.items()), flush=True)
    return {k: statistics.median(v) for k, v in times.items()}


def kernel_table(rows: list[dict]) -> str:
    """ms per step of each layout, and each sparse layout's speed-up over dense in brackets."""
    names = [k for k in rows[0] if k not in ("size", "batch", "keep", "dense")]
    lines = ["| layer (d x d_ff) | batch | keep | dense ms | " + " | ".join(f"{k} ms" for k in names) + " |",
             "|" + "---|" * (len(names) + 4)]
    for r in rows:
        lines.append(f"| {r['size']} | {r['batch']} | {r['keep']:.0%} | {r['dense'] * 1e3:.3f} | "
                     + " | ".join(f"{r[k] * 1e3:.3f} ({r['dense'] / r[k]:.2f}x)" for k in names) + " |")
    return "\n".join(lines)


def e2e_table(t: dict[str, float], batch: int) -> str:
    """Tokens/s, speed-up s over dense and, for the sparse rows, the Amdahl ceiling c at that keep (ceiling
    time = no-MLP time + keep x the MLP's share of dense time) and the share of the available gain,
    (s - 1)/(c - 1): 0% is dense, 100% the ceiling, below 0 slower than dense."""
    dense, skip = t["dense (transformers)"], t["MLP skipped (ceiling)"]
    lines = ["| decode | ms / step | tokens/s | vs dense | Amdahl ceiling at this keep | share of the available gain, "
             "(s − 1)/(c − 1) |", "|---|---|---|---|---|---|"]
    for name, s in t.items():
        found = re.search(r"keep (\d+)%", name)
        keep = int(found.group(1)) / 100 if found else None
        ceil = amdahl(dense, skip, keep) if keep else None
        lines.append(f"| {name} | {s * 1e3:.2f} | {batch / s:.1f} | {dense / s:.2f}x | "
                     + (f"{ceil:.2f}x | {(dense / s - 1) / (ceil - 1):.0%} |" if ceil else "| |"))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and tokens, batch 1 end to end, no sweep")
    p.add_argument("--device", type=device, default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--model", type=model_name, default="smollm2")
    p.add_argument("--overlap", type=fraction, default=None,
                   help="the cache's set overlap (default: measured on the model; given with --skip-e2e, no "
                        "model is loaded: a GPU machine that reaches no model hub)")
    p.add_argument("--rank", type=positive_int, default=128, help="the timed predictor's rank r (dejavu's default)")
    p.add_argument("--skip-kernel", action="store_true")
    p.add_argument("--skip-e2e", action="store_true")
    add_out(p)
    args = p.parse_args(argv)
    with recorded(args.out):
        return run(args)


def run(args) -> int:
    """The benchmark itself; what it prints is kept with --out."""
    if args.threads:
        torch.set_num_threads(args.threads)
    args.repeats = 3 if args.quick else 7
    args.prefill, decode = (16, 12) if args.quick else (32, 34)
    args.layouts = ("cached", "gather")
    batches = (1,) if args.quick else (1, 8)
    print(f"device {args.device}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    if args.skip_e2e and args.overlap is not None:  # the kernel alone, at a given overlap: no model needed
        print(f"\n(a) one layer's MLP, ms per token step (cache overlap {args.overlap}, given):", flush=True)
        print("\n" + kernel_table(bench_kernel(args, [args.overlap])))
        return 0
    from attnlab.evals.inputs import load_model, text_ids

    model, tok = load_model(args.model, args.device)
    model.eval()
    ids = text_ids(tok, "wikitext-2/valid.txt", max(batches) * (args.prefill + decode))
    ids = ids.view(max(batches), -1).to(args.device)  # (B, T): B different stretches of text
    masks, overlap = oracle_masks(model, ids, KEEPS)
    rules = chosen_rules(model, text_ids(tok, "kjv", 1024).to(args.device), KEEPS, args.rank)
    print("\nConsecutive-token overlap of the oracle sets (share of token t's set in token t+1's; mean over "
          "layers, lowest layer, highest layer):")
    for keep, (mean, lo, hi) in overlap.items():
        print(f"  keep {keep:.0%}: {mean:.2f} (layers {lo:.2f} to {hi:.2f})")
    if not args.skip_kernel:
        measured = overlap[0.5][0] if args.overlap is None else args.overlap
        overlaps = [round(measured, 2)] + ([] if args.quick else [o for o in (0.5, 0.9) if abs(o - measured) > .05])
        print(f"\n(a) one layer's MLP, ms per token step (cache overlap {overlaps}):", flush=True)
        print("\n" + kernel_table(bench_kernel(args, overlaps)))
    if not args.skip_e2e:
        for b in batches:
            print(f"\n(b) {args.model} decode, batch {b}, prefill {args.prefill}, {decode} steps "
                  "(first 2 untimed):", flush=True)
            sub = {k: {i: m[:b] for i, m in v.items()} for k, v in masks.items()}
            if b > 1:  # what one gather per step would copy: the union of the b rows' sets
                share = {k: float(torch.stack([m.any(0).float().mean() for m in v.values()]).mean())
                         for k, v in sub.items()}
                print("  union of the rows' oracle sets, share of neurons (mean over layers and steps): "
                      + ", ".join(f"keep {k:.0%}: {u:.1%}" for k, u in share.items()) + "; above "
                      f"{DENSE_ABOVE:.0%} SparseMLP's gather mode computes the step densely", flush=True)
            print("\n" + e2e_table(bench_e2e(args, model, ids[:b], sub, rules), b))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
