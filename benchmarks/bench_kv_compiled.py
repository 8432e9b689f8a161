"""The evicting caches' steady decode step, compiled (attnlab.kv.steady) and eager, side by side in one run.

Every cache streams the same text: its first --length tokens are prefilled (eager, chunks of 512), then each
takes --repeats turns of --steps single-token steps, the caches in turn (so the machine's drift hits them
alike). A turn's figure is its median step. Reported per cache: the median over turns, and, turn by turn, H2O's
step over sinks' at the same positions and compilation, with the sign test's interval of its median (issue
56's goal: H2O with rolling positions at most 5% over sinks a step). The first step of each compiled cache
compiles its graph, untimed.

    python benchmarks/bench_kv_compiled.py                        # SmolLM2, 4k streamed, budget 1024
    python benchmarks/bench_kv_compiled.py --wrapper cpp          # the graph's kernels called from C++
"""
from __future__ import annotations

import statistics
import sys
import time

import torch
from bench_kv_decode import prefill  # benchmarks/bench_kv_decode.py
from bench_llamacpp import paired  # benchmarks/bench_llamacpp.py

from attnlab.data.sources import read_corpus
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.kv.steady import CompiledPolicyDecode
from attnlab.models.compiled import WRAPPERS
from attnlab.models.pretrained import load_model_and_tokenizer

from host import add_out, corpus, kv_budget, machine, model_name, parser, positive_int, recorded  # benchmarks/host.py

WARM = 2  # untimed steps after the prefill
GOAL = 1.05  # H2O's step over sinks' at most (issue 56, item 6)


class Eager:
    """The eager PolicyCache stream, as CompiledPolicyDecode's prefill and step read it (no compiled step)."""

    def __init__(self, model, policy, positions):
        self.model, self.policy, self.positions = model, policy, positions

    def prefill(self, ids: torch.Tensor) -> None:
        """ids (1, T): chunks of 512, as bench_kv_decode prefills (and CompiledPolicyDecode by default)."""
        self.cache = prefill(self.model, ids[0], ids.shape[1],
                             lambda: PolicyCache(self.model, self.policy, self.positions))

    @torch.no_grad()
    def step(self, ids: torch.Tensor) -> torch.Tensor:
        with self.cache:
            return self.model(ids, past_key_values=self.cache, logits_to_keep=1).logits[:, -1]


def caches(model, budget: int, wrapper: str) -> dict:
    """name -> (decoder, policy name, positions, compiled)."""
    made = {}
    # grouped by (positions, compiled), so that the steps H2O's are compared with run right beside them
    for positions in ("rolling", "original"):
        for compiled in (True, False):
            for name in ("sinks", "h2o", "sinks+h2o"):
                if name == "sinks+h2o" and (positions, compiled) != ("rolling", True):
                    continue
                policy = make_policy(name, budget=budget, n_sink=4)
                dec = (CompiledPolicyDecode(model, policy, positions, wrapper) if compiled
                       else Eager(model, policy, positions))
                made[f"{policy.label()}, {positions}, {'compiled' if compiled else 'eager'}"] = (
                    dec, name, positions, compiled)
    return made


def run(args) -> dict:
    model, tok = load_model_and_tokenizer(args.model)
    text = "".join(read_corpus(args.text, "text")[:40000])
    n = args.length + WARM + args.repeats * args.steps
    ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"][:n])[None]
    if ids.shape[1] < n:
        raise SystemExit(f"--text {args.text} has {ids.shape[1]} tokens; this run needs {n}: lower --length")
    sides = caches(model, args.budget, args.wrapper)
    compile_s = {}
    for name, (dec, *_rest, compiled) in sides.items():
        dec.prefill(ids[:, :args.length])
        t0 = time.perf_counter()
        for i in range(WARM):  # the first evicts the last chunk's excess (eager); the compiled step builds its graph
            dec.step(ids[:, args.length + i:args.length + i + 1])
        compile_s[name] = time.perf_counter() - t0
        print(f"{name}: prefilled {args.length}, warm-up {compile_s[name]:.1f} s", file=sys.stderr, flush=True)
    at = args.length + WARM
    speeds = {name: [] for name in sides}  # tokens/s of each turn's median step
    for turn in range(args.repeats):
        order = list(sides.items())
        for name, (dec, *_rest) in order[::-1] if turn % 2 else order:  # who goes first alternates
            times = []
            for i in range(args.steps):
                t0 = time.perf_counter()
                dec.step(ids[:, at + i:at + i + 1])
                times.append(time.perf_counter() - t0)
            speeds[name].append(1 / statistics.median(times))
        at += args.steps
        print(f"turn {turn + 1} of {args.repeats}", file=sys.stderr, flush=True)
    return {"sides": sides, "speeds": speeds, "compile_s": compile_s}


def report(args, measured: dict, figures: dict) -> None:
    sides, speeds = measured["sides"], measured["speeds"]
    print(f"# {machine()}; {args.model} fp32, batch 1, budget {args.budget}, {args.length} tokens streamed before "
          f"timing, {args.repeats} turns of {args.steps} steps (a turn's median step), compiled: {args.wrapper} "
          "wrapper\n")
    print(f"| cache | tokens/s (median of turns) | ms a step | first {WARM} steps (s): the compile |")
    print("|---|---:|---:|---:|")
    figures["caches"] = {}
    for name in sides:
        tps = statistics.median(speeds[name])
        print(f"| {name} | {tps:.1f} | {1e3 / tps:.1f} | {measured['compile_s'][name]:.1f} |")
        figures["caches"][name] = {"tokens_per_s": tps, "turns": speeds[name],
                                   "warm_s": measured["compile_s"][name]}
    print(f"\nH2O's step over sinks' (goal: at most {GOAL - 1:.0%} over), turn by turn, the sign test's interval of "
          "the median:\n")
    print("| H2O | over sinks | interval | reads |")
    print("|---|---:|---|---|")
    figures["over_sinks"] = {}
    for name, (_dec, policy, positions, compiled) in sides.items():
        if policy == "sinks":
            continue
        base = next(k for k, (_, p, pos, c) in sides.items() if p == "sinks" and pos == positions and c == compiled)
        p = paired(speeds[base], speeds[name], goal=GOAL)  # sinks' speed over H2O's = H2O's step over sinks'
        del p["status"]  # paired's reads a speed-up; here the goal bounds the ratio from above
        reads = "met" if p["high"] <= GOAL else "not met" if p["low"] > GOAL else "unresolved"
        print(f"| {name} | {p['median'] - 1:+.1%} | {p['low'] - 1:+.1%} to {p['high'] - 1:+.1%} ({p['level']:.1%}) "
              f"| {reads} |")
        figures["over_sinks"][name] = {"sinks": base, "step_ratio": p, "goal": GOAL, "status": reads}


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", type=model_name, default="smollm2")
    ap.add_argument("--text", type=corpus(), default="kjv")
    ap.add_argument("--length", type=positive_int, default=4096, help="tokens streamed before timing (default 4096)")
    ap.add_argument("--budget", type=kv_budget("sinks", "h2o", "sinks+h2o"), default=1024)
    ap.add_argument("--steps", type=positive_int, default=8, help="timed steps a turn (default 8)")
    ap.add_argument("--repeats", type=positive_int, default=40, help="turns of every cache (default 40)")
    ap.add_argument("--wrapper", choices=WRAPPERS, default="python",
                    help="what calls the compiled step's kernels (default python; cpp: inductor's C++ wrapper)")
    add_out(ap)
    args = ap.parse_args(argv)
    if args.length <= args.budget:
        ap.error(f"--length {args.length} must exceed --budget {args.budget}: the steady step starts once the cache "
                 "is full")
    torch.set_num_threads(2)
    figures = {"model": args.model, "budget": args.budget, "length": args.length, "steps": args.steps,
               "repeats": args.repeats, "wrapper": args.wrapper}
    with recorded(args.out, figures):
        report(args, run(args), figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
