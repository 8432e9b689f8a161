"""Contextual sparsity's Triton kernels (SparseMLP mode "kernel") against the dense MLP at batch 1 on a GPU.

    python benchmarks/gpu_sparse_kernel.py --out benchmarks/results/gpu-sparse-kernel       # on a GPU
    TRITON_INTERPRET=1 python benchmarks/gpu_sparse_kernel.py --device cpu --small          # the script, here

(a) Each kernel equals the masked dense computation (float32 on the same bf16 weights; fresh random inputs).
(b) One MLP layer at Llama-3-8B's shape (d 4,096, d_ff 14,336, bfloat16, 352 MB: far beyond the L2, so every
    call reads its weights from memory), ms per token step, medians of CUDA-event timings: dense (three cuBLAS
    GEMVs), Deja Vu's kernels at several keeps (the neurons chosen at random: the chooser's cost is (c)'s),
    TEAL's at 50% of x and of h kept, gather mode's index lists (what ran on the GPU before), and the ceiling:
    dense GEMVs on pre-gathered half-size weights, the bytes of 50% kept at dense's bandwidth. Goal (issue 56):
    >= 1.4x dense at 50% kept; the share of the available gain is (s - 1) / (c - 1) against that ceiling. The
    kernels tune their block shapes on first use; the shapes chosen are reported.
(c) A random Llama-3-8B-shaped model (bfloat16) decoding: a 128-token prompt, then 64 greedy steps over a
    StaticCache, each step replayed from a CUDA graph (eager too): dense, the static 50% set (Deja Vu's kernels
    with a free chooser) and TEAL at 50% (thresholds calibrated on random tokens; its chooser is a compare).
    The variants take turns repeat by repeat; medians. Goal: >= 1.2x dense.
"""
from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

try:
    from attnlab.sparsity import kernels
except ImportError as e:  # Triton ships with PyTorch's CUDA wheels on Linux; a CPU-only install may lack it
    print(f"gpu_sparse_kernel.py: {e}: it needs Triton (install PyTorch's CUDA build, or `pip install triton` and "
          "set TRITON_INTERPRET=1 to run it on a CPU)", file=sys.stderr)
    sys.exit(2)
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.rules import TEAL, Static, magnitude_threshold

from host import add_out, device, machine, numbers, parser, positive_int, recorded  # benchmarks/host.py
from shapes import CONFIGS, random_llama  # benchmarks/shapes.py


def bench(fn, dev: str, reps: int = 200) -> float:
    """Median ms of fn(): CUDA events per call on a GPU (Triton's do_bench), a host clock on the CPU."""
    if dev == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=50, rep=reps, return_mode="median")
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def layer_weights(d: int, n: int, dev: str, dtype) -> dict:
    g = torch.Generator(device=dev).manual_seed(0)
    w = {k: (torch.randn(*s, generator=g, device=dev) * s[1] ** -0.5).to(dtype)
         for k, s in {"gate": (n, d), "up": (n, d), "down": (d, n)}.items()}
    w.update(gate_t=w["gate"].T.contiguous(), up_t=w["up"].T.contiguous(), down_t=w["down"].T.contiguous())
    return w


def check(w: dict, dev: str, dtype) -> dict:
    """(a): relative error of each kernel against float32 masked dense, on fresh inputs."""
    n, d = w["gate"].shape
    x = torch.randn(d, device=dev, dtype=dtype)
    keep = torch.rand(n, device=dev) < 0.5
    xf, gf, uf = x.float(), w["gate"].float(), w["up"].float()
    h_ref = F.silu(gf @ xf) * (uf @ xf) * keep
    h = kernels.gate_up(x, w["gate"], w["up"], keep, "silu")
    v = torch.randn(n, device=dev, dtype=dtype) * keep
    y = kernels.rows_axpy(v, w["down_t"])
    return {"gate_up": rel(h, h_ref), "rows_axpy": rel(y, v.float() @ w["down_t"].float()),
            "dropped_rows_zero": bool((h[~keep] == 0).all())}


def layer_variants(w: dict, keeps: tuple, dev: str, dtype) -> dict:
    """name -> fn() of one token through one MLP layer."""
    n, d = w["gate"].shape
    x = torch.randn(d, device=dev, dtype=dtype)
    dense_h = F.silu(w["gate"] @ x) * (w["up"] @ x)
    t_x, t_h = magnitude_threshold(x[None], 0.5), magnitude_threshold(dense_h[None], 0.5)
    out = {"dense": lambda: w["down"] @ (F.silu(w["gate"] @ x) * (w["up"] @ x))}
    for k in keeps:
        keep = torch.rand(n, device=dev) < k
        rows = keep.nonzero().squeeze(1)
        half = {key: w[key][rows].contiguous() for key in ("gate", "up")}
        half["down"] = w["down"][:, rows].contiguous()
        out[f"Deja Vu kernel, keep {k:g}"] = lambda keep=keep: kernels.rows_axpy(
            kernels.gate_up(x, w["gate"], w["up"], keep, "silu"), w["down_t"])
        out[f"gather's index list, keep {k:g}"] = lambda keep=keep: F.embedding_bag(
            (r := keep.nonzero().squeeze(1))[None], w["down_t"],
            per_sample_weights=(F.silu(w["gate"][r] @ x) * (w["up"][r] @ x))[None], mode="sum")
        out[f"ceiling: pre-gathered, keep {k:g}"] = lambda half=half: half["down"] @ (
            F.silu(half["gate"] @ x) * (half["up"] @ x))

    def teal():
        xm = x * (x.abs() >= t_x)
        h = F.silu(kernels.rows_axpy(xm, w["gate_t"]).to(dtype)) * kernels.rows_axpy(xm, w["up_t"]).to(dtype)
        return kernels.rows_axpy(h * (h.abs() >= t_h), w["down_t"])

    out["TEAL kernels, x and h keep 0.5"] = teal
    return out


def layer_table(w: dict, keeps: tuple, dev: str, dtype) -> list[dict]:
    fns = layer_variants(w, keeps, dev, dtype)
    for fn in fns.values():
        fn()  # first use: the kernels tune their block shapes for these weight shapes
    ms = {name: bench(fn, dev) for name, fn in fns.items()}
    rows = []
    for name, t in ms.items():
        keep = name.rsplit("keep ", 1)[-1] if "keep" in name else None
        ceiling = ms.get(f"ceiling: pre-gathered, keep {keep}") if keep and "ceiling" not in name else None
        s, c = ms["dense"] / t, (ms["dense"] / ceiling if ceiling else None)
        rows.append({"variant": name, "ms": t, "x_dense": s, "ceiling_x_dense": c,
                     "share_of_gain": (s - 1) / (c - 1) if c and c > 1 else None})
    return rows


def tuned() -> list[dict]:
    """The block shapes each kernel's tuning chose, per weight shape (its key)."""
    return [{"kernel": name, "key": str(key), "best": str(best)}
            for name, k in (("gate_up", kernels._gate_up_kernel), ("rows_axpy", kernels._rows_axpy_kernel))
            for key, best in k.cache.items()]


def rules(model, dev: str) -> dict:
    """The sparse variants' rules at 50%: a static random set per layer (Deja Vu's kernels, a free chooser)
    and TEAL calibrated on 512 random tokens (x and h thresholds)."""
    from attnlab.sparsity.measure import calibrate

    cfg = model.config
    g = torch.Generator().manual_seed(1)
    n = cfg.intermediate_size
    static = Static({i: torch.randperm(n, generator=g)[:n // 2] for i in range(cfg.num_hidden_layers)}, keep=0.5)
    calib = torch.randint(0, cfg.vocab_size, (512,), generator=g).to(dev)
    t_x, t_h = calibrate(model, calib, 0.5, "teal", window=256)
    return {"static 50% (Deja Vu's kernels)": static, "TEAL 50% (x and h)": TEAL(t_x, t_h, keep=0.5)}


class Decoder:
    """One variant's greedy decode over its own StaticCache: ``step()`` runs one token (argmax and position
    advance included, all on the device); ``capture()`` records it as a CUDA graph that ``replay()`` reruns."""

    def __init__(self, model, prompt: torch.Tensor, steps: int):
        from transformers import StaticCache

        self.model, self.p = model, prompt.numel()
        self.cache = StaticCache(config=model.config, max_cache_len=self.p + steps + 16)
        dev = prompt.device
        with torch.no_grad():
            logits = model(prompt[None], past_key_values=self.cache, use_cache=True, logits_to_keep=1).logits
        self.first = logits[0, -1].argmax()
        self.ids = torch.zeros(1, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, 1, dtype=torch.long, device=dev)
        self.graph = None
        self.reset()

    def reset(self) -> None:
        """Back to just after the prompt (the cache's later slots are overwritten as decoding goes on)."""
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(self.p)
        self.ids.copy_(self.first.view(1, 1))
        self.pos.fill_(self.p)

    @torch.no_grad()
    def step(self) -> None:
        logits = self.model(self.ids, position_ids=self.pos, past_key_values=self.cache, use_cache=True,
                            logits_to_keep=1).logits  # (1, 1, V)
        self.ids.copy_(logits[:, -1].argmax(-1, keepdim=True))
        self.pos.add_(1)
        self.logits = logits  # in a graph: its output buffer, rewritten by each replay

    def capture(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up off the capture: kernels compiled, workspaces allocated
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        self.reset()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()
        self.graph_logits = self.logits  # the graph's output buffer (an eager step rebinds self.logits)
        self.reset()

    def first_logits(self, graph: bool) -> torch.Tensor:
        """The first step's logits (1, 1, V), replayed or eager."""
        self.reset()
        self.graph.replay() if graph else self.step()
        return (self.graph_logits if graph else self.logits).clone()

    def tokens(self, n: int, graph: bool) -> list[int]:
        self.reset()
        out = []
        for _ in range(n):
            self.graph.replay() if graph else self.step()
            out.append(int(self.ids))
        return out


def agreement(model, rule, dev: str) -> dict:
    """Mode kernel against mode mask (the masked dense MLP), relative error: layer 0's MLP on one random
    token's hidden state, and the whole model's logits for one token (errors compound over the layers)."""
    from attnlab.models import arch

    tok, x = torch.tensor([[1]], device=dev), torch.randn(1, 1, model.config.hidden_size, device=dev)
    out = {}
    for mode in ("mask", "kernel"):
        with torch.no_grad(), SparseMLP(model, rule, mode=mode):
            out[mode] = model(tok).logits[0, -1], arch.mlp(model, 0).module(x.to(model.dtype))
    return {"layer0": rel(out["kernel"][1], out["mask"][1]), "logits": rel(out["kernel"][0], out["mask"][0])}


def decode_table(model, prompt, steps: int, repeats: int, dev: str, graphs: bool) -> dict:
    """(c): tokens/s of each variant, eager and (``graphs``, on a GPU) from a CUDA graph, in turns; medians."""
    variants = {"dense": None, **rules(model, dev)}
    decoders, entered, agree = {}, {}, {}
    for name, rule in variants.items():
        if rule is not None:
            agree[name] = agreement(model, rule, dev)
            entered[name] = SparseMLP(model, rule, mode="kernel")
        with entered.get(name) or torch.no_grad():
            decoders[name] = d = Decoder(model, prompt, steps)
            if graphs:
                d.capture()  # the graph holds the kernel layers' weights: their forwards are kept below
                d.kept = [getattr(m, "forward", None) for m in model.modules()]
    ways = ("eager", "graph") if graphs else ("eager",)
    times = {(name, way): [] for name in variants for way in ways}
    for _ in range(repeats):
        for name in variants:
            for way in ways:
                with (entered.get(name) if way == "eager" and name in entered else torch.no_grad()):
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    decoders[name].tokens(steps, way == "graph")
                    times[(name, way)].append(time.perf_counter() - t0)
    same = {}  # the graph computes the eager step: the first step's logits (atomics sum in any order)
    for name in variants if graphs else ():
        with entered.get(name) or torch.no_grad():
            d = decoders[name]
            same[name] = {"graph_vs_eager": rel(d.first_logits(True), d.first_logits(False)),
                          "eager_vs_eager": rel(d.first_logits(False), d.first_logits(False))}
    rows = []
    for name in variants:
        row = {"variant": name, "rel_err_vs_mask_mode": agree.get(name), "first_step_logits_rel_err": same.get(name)}
        for way in ways:
            med = statistics.median(times[(name, way)])
            base = statistics.median(times[("dense", way)])
            row[way] = {"tokens_per_s": steps / med, "x_dense": base / med, "seconds": times[(name, way)]}
        rows.append(row)
    return {"rows": rows, "steps": steps, "repeats": repeats, "prompt": prompt.numel()}


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--device", type=device, default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes and a 2-layer model (the script's own check)")
    ap.add_argument("--keeps", type=numbers(float, "(0, 1)"), default=(0.5, 0.4, 0.25),
                    help="Deja Vu's kept shares in the layer table (default 0.5,0.4,0.25)")
    ap.add_argument("--steps", type=positive_int, default=64, help="greedy steps per timed decode (default 64)")
    ap.add_argument("--repeats", type=positive_int, default=5, help="timed decodes per variant, in turns (default 5)")
    add_out(ap)
    args = ap.parse_args(argv)
    dev, dtype = args.device, torch.bfloat16 if args.device == "cuda" else torch.float32
    cfg = CONFIGS["llama3-8b"]
    d, n = (64, 160) if args.small else (cfg["hidden_size"], cfg["intermediate_size"])
    over = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=512, bos_token_id=0, eos_token_id=1) if args.small else {}
    with recorded(args.out, figures := {}):
        name = torch.cuda.get_device_name() if dev == "cuda" else "no GPU"
        print(f"# {machine()}; device {dev} ({name}); {dtype}; Triton {__import__('triton').__version__}\n")
        w = layer_weights(d, n, dev, dtype)
        figures["check"] = check(w, dev, dtype)
        print("(a) relative error against float32 masked dense:", figures["check"])
        figures["layer"] = layer_table(w, args.keeps, dev, dtype)
        print(f"\n(b) one MLP layer, d {d} x d_ff {n}, batch 1, ms per step\n\n| variant | ms | x dense | "
              "ceiling x dense | share of the gain |\n|---|---|---|---|---|")
        for r in figures["layer"]:
            c, sh = r["ceiling_x_dense"], r["share_of_gain"]
            print(f"| {r['variant']} | {r['ms']:.4f} | {r['x_dense']:.2f} | {'' if c is None else f'{c:.2f}'} | "
                  f"{'' if sh is None else f'{sh:.2f}'} |")
        figures["tuned"] = tuned()
        print("\nblock shapes chosen:", "; ".join(f"{r['kernel']} {r['key']}: {r['best']}" for r in figures["tuned"]))
        del w
        model = random_llama("llama3-8b", dev, dtype, **over)
        prompt = torch.randint(0, model.config.vocab_size, (128,), generator=torch.Generator().manual_seed(2))
        try:
            figures["decode"] = decode_table(model, prompt.to(dev), args.steps, args.repeats, dev, dev == "cuda")
        except Exception as e:  # a step that cannot be captured: say why, and measure eager alone
            figures["graph_error"] = f"{type(e).__name__}: {e}"
            print(f"\nno CUDA graph ({figures['graph_error'][:300]}): eager only")
            torch.cuda.synchronize() if dev == "cuda" else None
            figures["decode"] = decode_table(model, prompt.to(dev), args.steps, args.repeats, dev, False)
        print(f"\n(c) random Llama-3-8B-shaped model{' (small)' if args.small else ''}, 128-token prompt, "
              f"{args.steps} greedy steps, {args.repeats} repeats in turns, median tokens/s (x dense)\n")
        for r in figures["decode"]["rows"]:
            ways = "; ".join(f"{w} {r[w]['tokens_per_s']:.1f} ({r[w]['x_dense']:.2f}x)" for w in ("eager", "graph")
                             if w in r)
            print(f"- {r['variant']}: {ways}; relative error, kernel vs mask mode: {r['rel_err_vs_mask_mode']}; "
                  f"first step's logits: {r['first_step_logits_rel_err']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
