"""Decode that pays: SmolLM2 tokens/s under int8 weights, alone and composed with sparse MLP and eviction.

Each configuration runs on its own copy of the model with its methods entered once; after each has
prefilled its prompt, the configurations take turns step by step (so the machine's drift hits all alike)
and the median step time of each is reported, at batch 1 and batch 8:

- fp32: the float model, transformers' DynamicCache (decode today)
- bf16: the model cast to bfloat16 (half the bytes per weight, no method: is this CPU's bf16 GEMV faster?)
- int8: ``QuantizedWeights(model, "int8")`` (attnlab.quant); int4: the same with the int4 scheme (groups of 32)
- int8 + cats 50% / int8 + predicted 50%: and ``SparseMLP`` in gather mode (the int8 rows of the kept neurons);
  CATS calibrated on WikiText-2 valid, the Deja Vu predictors saved beside the model (lookahead)
- int8 + sinks+window: and ``PolicyCache(sinks, budget 1024)`` after a prompt of ``--long`` tokens (8k), beside
  fp32 and int8 with the full cache at the same length (batch 1 only)

The ceiling: the same step's projections alone -- a chain of GEMVs through every weight the model reads
per token (int8: the int8 kernel; int4: the int4 kernel; fp32: F.linear), timed in the same rounds. No step can
be faster than its int8 chain (an int4 step: its int4 chain), so the ceiling of a speed-up over fp32 is
c = fp32 step / that chain, and each configuration's speed-up s is also given as the share of the available
gain, (s - 1)/(c - 1).

Each row's bandwidth ledger (attnlab.core.ledger): the bytes a step reads -- weights at their stored bytes (a
sparse MLP's projections at the share it keeps), the KV cache as it stood after the last timed step (all batch
rows), a predictor's weights -- the roofline tokens/s at the copy bandwidth measured in the same run, and the
yield, measured over roofline.

    python benchmarks/bench_decode.py --out benchmarks/results/bench-decode
"""
from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from attnlab.core import weights
from attnlab.core.errors import UsageError
from attnlab.core.ledger import copy_bandwidth, weight_bytes
from attnlab.evals.inputs import text_ids
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.models import arch
from attnlab.models.pretrained import load_model_and_tokenizer
from attnlab.quant.schemes import SCHEMES
from attnlab.quant.transform import QuantizedWeights, projections
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.registry import RULES, RuleInputs

from host import add_out, natural, parser, positive_int, recorded  # benchmarks/host.py

MODEL = "smollm2"


class Run:
    """One configuration: its own model copy with its methods entered, its cache, its step times. ``build``
    enters the methods and may set ``shares`` (projections read in part) and ``extra_bytes`` for the ledger."""

    def __init__(self, name: str, build, tok, batch: int, prompt: torch.Tensor, cache=None):
        self.name, self.times = name, []
        self.shares, self.extra_bytes = {}, 0
        self.model, _ = load_model_and_tokenizer(MODEL)
        self.stack = contextlib.ExitStack()
        build(self, tok)
        self.cache = cache(self.model) if cache else DynamicCache(config=self.model.config)
        if isinstance(self.cache, PolicyCache):
            self.stack.enter_context(self.cache)
        with torch.no_grad():
            for s in range(0, prompt.shape[1], 512):  # chunked prefill
                logits = self.model(prompt[:, s:s + 512], past_key_values=self.cache, use_cache=True).logits
        self.next = logits[:, -1:].argmax(-1)  # (B, 1)

    @torch.no_grad()
    def step(self, timed: bool) -> None:
        t0 = time.perf_counter()
        logits = self.model(self.next, past_key_values=self.cache, use_cache=True).logits  # (B, 1, V)
        self.next = logits.argmax(-1)  # the argmax syncs: part of the step, as in any decode
        if timed:
            self.times.append(time.perf_counter() - t0)

    def bytes_per_step(self) -> tuple[int, int, int]:
        """(weights, KV, extra) bytes one step reads: the cache as it stands now."""
        from bench_kv_decode import kv_bytes  # benchmarks/bench_kv_decode.py

        return weight_bytes(self.model, self.shares), kv_bytes(self.cache), self.extra_bytes


def _float(run, tok):
    pass


def _bf16(run, tok):
    run.model.to(torch.bfloat16)


def _weights(scheme: str):
    def build(run, tok):
        run.stack.enter_context(QuantizedWeights(run.model, scheme))
    return build


_int8 = _weights("int8")


def _sparse(rule_name: str, keep: float = 0.5):
    def build(run, tok):
        _int8(run, tok)
        kind = RULES.get(rule_name)
        calib = text_ids(tok, "wikitext-2/valid.txt", 2048) if kind.reads == "calibration" else None
        rule = kind.build(run.model, RuleInputs(calib, 512, None, MODEL))(keep)
        sparse = run.stack.enter_context(SparseMLP(run.model, rule, mode="gather"))
        # the ledger: gather mode reads the kept rows of each projection, and Deja Vu's predictors beside them
        run.shares = {p: keep for p in arch.mlp_projections(run.model)}
        run.extra_bytes = sparse.predictor_bytes()
    return build


def _run_or_say(name: str, build, tok, batch: int, prompt: torch.Tensor) -> Run | None:
    """The configuration's Run; None, with a line saying why, where this machine lacks what it reads (Deja Vu's
    predictors are trained by `attnlab reproduce dejavu`, not shipped)."""
    try:
        return Run(name, build, tok, batch, prompt)
    except UsageError as e:  # MissingResource, ConfigError: what it reads is not here
        print(f"\n{name}: not run here ({e})")
        return None


class chain:
    """One step's projections alone (x random; the shapes and bytes are the model's) under a weight scheme (None:
    the float weights, cast to ``dtype``): call it to run them; ``nbytes``, the weights it reads."""

    def __init__(self, model, scheme: str | None, batch: int, dtype: torch.dtype = torch.float32):
        projs = projections(model)
        xs = [torch.randn(batch, arch.weight(p).shape[1]) for p in projs]
        if scheme:  # the model's own quantized weights where a scheme is entered on it (a calibrated one must be)
            own = [weights.of(p) for p in projs]
            self.xs, self.ws = xs, [w if w is not None else SCHEMES.get(scheme).quantize(arch.weight(p))
                                    for w, p in zip(own, projs)]
            self.run = lambda: [w.linear(x) for x, w in zip(self.xs, self.ws)]
        else:
            self.xs, self.ws = [x.to(dtype) for x in xs], [arch.weight(p).detach().to(dtype) for p in projs]
            self.run = lambda: [F.linear(x, w) for x, w in zip(self.xs, self.ws)]
        self.nbytes = sum(w.nbytes for w in self.ws)

    def __call__(self):
        return self.run()


def _ledger_cells(tokens_per_s: float, parts: tuple[int, int, int], batch: int, bandwidth: float) -> str:
    """The ledger's cells from a step's (weights, KV, predictor) bytes: MiB a step, of it the KV's and the
    predictors', roofline tokens/s, yield."""
    total = sum(parts)
    roofline = batch * bandwidth / total  # tokens/s: the batch's tokens per read of the step's bytes
    return (f"{total / 2**20:.1f} | {parts[1] / 2**20:.1f} | {parts[2] / 2**20:.1f} | {roofline:.1f} | "
            f"{tokens_per_s / roofline:.0%}")


def table(runs: list[Run], chains: dict, steps: int, warmup: int, title: str, bandwidth: float) -> None:
    chain_times = {k: [] for k in chains}
    for s in range(warmup + steps):
        for r in runs:
            r.step(s >= warmup)
        for k, fn in chains.items():
            t0 = time.perf_counter()
            fn()
            if s >= warmup:
                chain_times[k].append(time.perf_counter() - t0)
    base = statistics.median(runs[0].times)
    b = runs[0].next.shape[0]
    print(f"\n### {title} ({steps} steps each, turns interleaved, medians)\n")
    print("| configuration | ms/step | tokens/s | vs fp32 | MiB a step | KV MiB | predictor MiB | roofline tokens/s "
          "| yield |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        t = statistics.median(r.times)
        print(f"| {r.name} | {t * 1e3:.2f} | {b / t:.1f} | {base / t:.2f}x | "
              f"{_ledger_cells(b / t, r.bytes_per_step(), b, bandwidth)} |")
    chain_med = {k: statistics.median(ts) for k, ts in chain_times.items()}
    for k, t in chain_med.items():
        print(f"| ceiling: {k} GEMV chain alone | {t * 1e3:.2f} | {b / t:.1f} | {base / t:.2f}x | "
              f"{_ledger_cells(b / t, (chains[k].nbytes, 0, 0), b, bandwidth)} |")
    if "int8" in chain_med:  # the step can be no faster than reading its int8 weights: c = fp32 step / int8 chain
        print()
        for r in runs[1:]:  # (int4 rows: their own int4 chain, whose weights are fewer bytes)
            scheme = "int4" if r.name.startswith("int4") and "int4" in chain_med else "int8"
            c, floor = base / chain_med[scheme], chain_med[scheme]
            t = statistics.median(r.times)
            print(f"{r.name}: {base / t:.2f}x fp32 of a {c:.2f}x ceiling, {(base / t - 1) / (c - 1):.0%} of the "
                  f"available gain; the weights' reads are {floor / t:.0%} of its step")


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--steps", type=positive_int, default=24, help="timed decode steps per configuration")
    ap.add_argument("--warmup", type=natural, default=4, help="untimed steps first")
    ap.add_argument("--prompt", type=positive_int, default=256, help="prompt tokens (the short-context tables)")
    ap.add_argument("--long", type=natural, default=8192, help="prompt tokens of the eviction table (0: skip it)")
    ap.add_argument("--batch", type=positive_int, nargs="+", default=[1, 8])
    add_out(ap)
    args = ap.parse_args(argv)
    _, tok = load_model_and_tokenizer(MODEL)
    ids = text_ids(tok, "wikitext-2/test.txt", max(args.long, args.prompt * max(args.batch)))
    configs = [("fp32", _float), ("bf16", _bf16), ("int8", _int8),
               ("int4", _weights("int4")), ("int8 + cats 50%", _sparse("cats")),
               ("int8 + predicted 50%", _sparse("predicted"))]
    with recorded(args.out):
        bandwidth = copy_bandwidth()  # measured here, beside the runs it sets the roofline of
        print(f"# Decode on SmolLM2-135M ({torch.get_num_threads()} threads); copy bandwidth "
              f"{bandwidth / 1e9:.1f} GB/s (read + written)")
        for b in args.batch:
            prompt = ids[:b * args.prompt].view(b, args.prompt)  # b different stretches of the text
            runs = [r for name, build in configs if (r := _run_or_say(name, build, tok, b, prompt))]
            chains = {"fp32": chain(runs[0].model, None, b), "int8": chain(runs[0].model, "int8", b),
                      "int4": chain(runs[0].model, "int4", b)}
            table(runs, chains, args.steps, args.warmup, f"batch {b}, prompt {args.prompt} tokens", bandwidth)
            del runs, chains
        if args.long:
            prompt = ids[None, :args.long]
            sinks = lambda m: PolicyCache(m, make_policy("sinks", 1024, n_sink=4), "rolling")  # noqa: E731
            runs = [Run("fp32, full cache", _float, tok, 1, prompt),
                    Run("int8, full cache", _int8, tok, 1, prompt),
                    Run("int8 + sinks+window 1024", _int8, tok, 1, prompt, cache=sinks)]
            table(runs, {}, args.steps, args.warmup, f"batch 1 after {args.long} tokens", bandwidth)


if __name__ == "__main__":
    main()
