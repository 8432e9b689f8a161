"""Sparse MLP speed: one layer's MLP (dense vs sparse layouts) and SmolLM2's decode, side by side in one run.

(a) Kernel: one SwiGLU MLP with random weights at SmolLM2's size (576 x 1536) and Llama-2-7B's
(4096 x 11008), batch 1 and 8, keep 50/35/25% of the neurons: dense; per-step ``index_select`` gather
of W_gate, W_up and W_down^T rows; the same with W_down^T's rows summed in place by ``embedding_bag``
(PowerInfer's axpy: no copy for the down projection); pre-gathered contiguous rows (a static set, copied once); the active-set cache (``ActiveSet``) fed a
sequence of sets whose consecutive overlap is the one measured on SmolLM2 in (b) (or ``--overlap``).
At batch 8 the step's set (the union of the rows' sets) has the keep fraction's size.
(b) End to end on SmolLM2: tokens/s of transformers' dense decode, of the same decode with every MLP
returning zeros (the Amdahl ceiling), and of SparseMLP decode with the oracle's sets *given*: computed
beforehand from the dense model's h on the same tokens and replayed by a rule, so choosing the set is
not timed (the sets are the dense model's, not the ones the sparse model would pick: same sizes and
overlap, which is what the timing depends on).

The variants take turns (round-robin), repeated; figures are medians.

    python benchmarks/bench_sparse_mlp.py --quick          # ~2 minutes on the 2-core CPU
    python benchmarks/bench_sparse_mlp.py                  # full: more repeats, batch 8 end to end, overlap sweep
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.sparsity.gather import ActiveSet
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.rules import keep_count, topk_mask

KEEPS = (0.5, 0.35, 0.25)
SIZES = {"SmolLM2 576x1536": (576, 1536), "Llama-2-7B 4096x11008": (4096, 11008)}


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


def kernel_variants(d: int, n: int, batch: int, keep: float, overlaps: list[float], device: str) -> dict:
    """The MLP of one layer, each layout as a no-argument step function (each call: the next token)."""
    g = torch.Generator().manual_seed(0)
    w_gate, w_up = (torch.randn(n, d, generator=g).to(device) / d ** 0.5 for _ in range(2))  # (n, d)
    w_down = (torch.randn(d, n, generator=g) / n ** 0.5).to(device)  # (d, n)
    w_down_t = w_down.T.contiguous()  # (n, d)
    x = torch.randn(batch, d, generator=g).to(device)  # (B, d)
    k = keep_count(n, keep)
    walks = {o: set_walk(n, k, o, 64, device) for o in overlaps}
    rows = [m.nonzero().squeeze(1) for m in walks[overlaps[0]]]  # (k,) each
    static = ActiveSet((w_gate, w_up), w_down_t)
    static.update(walks[overlaps[0]][0])
    step = {"i": 0}

    def dense():
        return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)  # (B, d)

    # the copies go to buffers allocated once: a fresh 45 MB tensor per call (7B size) would time the
    # allocator's page faults, not the copy
    scratch = [w_gate.new_empty(k, d) for _ in range(3)]  # (k, d) each

    def gathered_h():
        r = rows[step["i"] % len(rows)]
        step["i"] += 1
        g, u = (torch.index_select(w, 0, r, out=s) for w, s in zip((w_gate, w_up), scratch))  # (k, d)
        return r, F.silu(F.linear(x, g)) * F.linear(x, u)  # (B, k)

    def gather():
        r, h = gathered_h()
        return h @ torch.index_select(w_down_t, 0, r, out=scratch[2])  # (B, d)

    def axpy():  # W_down^T's rows summed in place, weighted by h (no copy)
        r, h = gathered_h()
        return F.embedding_bag(r.expand(batch, -1), w_down_t, per_sample_weights=h, mode="sum")  # (B, d)

    def run(cache: ActiveSet, walk=None):
        if walk is not None:
            cache.update(walk[cache.steps % len(walk)])
        y = cache.forward_in(x)  # (B, k, 2)
        return cache.forward_out(F.silu(y[..., 0]) * y[..., 1], None)

    fns = {"dense": dense, "index_select": gather, "index_select + axpy down": axpy, "pre-gathered": lambda: run(static)}
    for o, walk in walks.items():
        cache = ActiveSet((w_gate, w_up), w_down_t)
        fns[f"cache o={o:.2f}"] = lambda c=cache, w=walk: run(c, w)
    return fns


def bench_kernel(args, overlaps: list[float]) -> list[dict]:
    rows = []
    for size, (d, n) in SIZES.items():
        for batch in (1, 8):
            for keep in KEEPS:
                fns = kernel_variants(d, n, batch, keep, overlaps, args.device)
                inner = 4 if n > 4000 else 20
                with torch.no_grad():
                    t = round_robin(fns, args.repeats, inner, args.device)
                rows.append({"size": size, "batch": batch, "keep": keep, **t})
                print(f"  {size} batch {batch} keep {keep}: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in t.items()),
                      flush=True)
    return rows


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


@contextlib.contextmanager
def no_mlp(model):
    """Every MLP returns zeros: the decode time no MLP sparsity can beat."""
    mods = [arch.mlp(model, i).module for i in range(len(arch.layers(model)))]
    try:
        for m in mods:
            m.forward = torch.zeros_like
        yield
    finally:
        for m in mods:
            m.__dict__.pop("forward", None)


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


def e2e_variants(model, masks: dict, layouts) -> dict:
    """Name -> a fresh context for one decode (a new Given rule each time: it replays from token 0)."""
    out = {"dense (transformers)": contextlib.nullcontext, "MLP skipped (ceiling)": lambda: no_mlp(model)}
    for keep, m in masks.items():
        for mode in layouts:
            out[f"{mode} keep {keep:.0%}"] = lambda m=m, mode=mode: SparseMLP(model, Given(m), mode=mode)
    return out


def bench_e2e(args, model, ids: torch.Tensor, masks: dict) -> dict[str, float]:
    """Each variant decodes the same tokens in turn, ``repeats`` rounds: {name: median s per step}."""
    variants = e2e_variants(model, masks, args.layouts)
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
    """Tokens/s, speed-up over dense and, for the sparse rows, the share of the Amdahl ceiling at that keep
    (ceiling time = no-MLP time + keep x the MLP's share of dense time)."""
    dense, skip = t["dense (transformers)"], t["MLP skipped (ceiling)"]
    lines = ["| decode | ms / step | tokens/s | vs dense | Amdahl ceiling at this keep | share of ceiling |",
             "|---|---|---|---|---|---|"]
    for name, s in t.items():
        keep = float(name.split("keep ")[1].rstrip("%")) / 100 if "keep" in name else None
        ceil = dense / (skip + keep * (dense - skip)) if keep else None
        lines.append(f"| {name} | {s * 1e3:.2f} | {batch / s:.1f} | {dense / s:.2f}x | "
                     + (f"{ceil:.2f}x | {(dense / s) / ceil:.0%} |" if ceil else "| |"))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and tokens, batch 1 end to end, no sweep")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--overlap", type=float, default=None, help="the cache's set overlap (default: measured)")
    p.add_argument("--skip-kernel", action="store_true")
    p.add_argument("--skip-e2e", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.repeats = 3 if args.quick else 7
    args.prefill, decode = (16, 12) if args.quick else (32, 34)
    args.layouts = ("cached", "gather")
    batches = (1,) if args.quick else (1, 8)
    print(f"device {args.device}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    from attnlab.evals.inputs import load_model, text_ids

    model, tok = load_model(args.model, args.device)
    model.eval()
    ids = text_ids(tok, "wikitext-2/valid.txt", max(batches) * (args.prefill + decode))
    ids = ids.view(max(batches), -1).to(args.device)  # (B, T): B different stretches of text
    masks, overlap = oracle_masks(model, ids, KEEPS)
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
                  "(first 2 untimed), oracle sets given:", flush=True)
            sub = {k: {i: m[:b] for i, m in v.items()} for k, v in masks.items()}
            print("\n" + e2e_table(bench_e2e(args, model, ids[:b], sub), b))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
