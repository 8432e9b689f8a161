"""Where a compiled decode step's time goes: SmolLM2-135M at batch 1 under a weight scheme (default w8a8), its
step compiled as benchmarks/bench_llamacpp.py compiles it (attnlab.models.compiled: a static cache, the step one
graph), the same 256 prompt ids and 128 greedy tokens, profiled with torch.profiler. Each op's own time
(self time) is summed into what the op is:

- integer products: ``torch._int_mm`` (W8A8's, every projection and the LM head)
- other products: the float and weight-only kernels (``mm``, ``addmm``, ``_weight_int8pack_mm``)
- attention: the two batched products of each layer's query with the static cache (keys, then values)
- fused loops: the kernels inductor generated (each input's rounding, norms, rotary, softmax, residuals)
- the graph's call: the compiled graph's own time outside the kernels it calls (its wrapper: taking its
  inputs -- every weight is one -- allocating outputs, calling each kernel)
- guards: Dynamo's guard check and the bytecode before and around the graph
- between steps: the decode loop's own ops (argmax, the next token's tensor, its copy into the step's buffer)

Why: issue 56's goal (W8A8 >= 0.8x llama.cpp Q8_0) leaves the step a few milliseconds outside the integer
kernel, and the step spends more; this says on what. The profiler adds microseconds to each op it records,
so its step is longer than the step timed bare; the table gives both, and each part's share of the profiled
step. Inductor's kernels show under their own names only with its kernel profiling on (set here).

    python benchmarks/bench_step_profile.py --wrapper cpp --out benchmarks/results/step-profile-w8a8
"""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict

import torch
from bench_llamacpp import PROMPT, STEPS, Attnlab, Compiled  # benchmarks/bench_llamacpp.py

from attnlab.evals.inputs import text_ids
from attnlab.models.compiled import WRAPPERS
from attnlab.models.pretrained import load_model_and_tokenizer
from attnlab.quant.schemes import SCHEMES

from host import add_out, machine, one_of, parser, positive_int, recorded  # benchmarks/host.py

PARTS = (  # (part, does an op of this name belong to it), first match wins; the rest is "other"
    ("integer products", lambda n: n == "aten::_int_mm"),
    ("other products", lambda n: n in ("aten::mm", "aten::addmm", "aten::_weight_int8pack_mm", "aten::linear")),
    ("attention", lambda n: n in ("aten::bmm", "aten::baddbmm") or "scaled_dot_product" in n),
    ("fused loops", lambda n: "cpp_fused" in n),
    ("the graph's call", lambda n: n.startswith("## Call CompiledFxGraph")),
    ("guards", lambda n: n.startswith(("TorchDynamo", "Pregraph", "AOTDispatcher", "Torch-Compiled Region"))),
    ("between steps", lambda n: n in ("aten::argmax", "aten::lift_fresh", "aten::copy_", "aten::_to_copy",
                                      "aten::to", "aten::view", "aten::select", "aten::item",
                                      "aten::_local_scalar_dense")),
)
TOP = 15  # ops listed one by one
SHIM = "aoti_torch_cpu_"  # the C++ wrapper calls an aten op through its shim: aoti_torch_cpu_<op>_out


def part(name: str) -> str:
    if name.startswith(SHIM):
        name = "aten::" + name[len(SHIM):].removesuffix("_out")
    return next((p for p, belongs in PARTS if belongs(name)), "other")


def profiled(side: Compiled) -> tuple[dict, dict, list]:
    """``side``'s STEPS - 1 greedy steps after its prefill (the eager prefill outside the profile), under the
    profiler -> (part -> self seconds, part -> calls, the ops by self time: (name, seconds, calls))."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU])
    side.dec.greedy(side.prompt, STEPS, prompted=prof.start)  # the profile starts once the prompt is in
    prof.stop()
    seconds, calls = defaultdict(float), defaultdict(int)
    ops = sorted(((ev.key, ev.self_cpu_time_total / 1e6, ev.count) for ev in prof.key_averages()),
                 key=lambda op: -op[1])
    for name, sec, n in ops:
        seconds[part(name)] += sec
        calls[part(name)] += n
    return seconds, calls, ops


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--scheme", type=one_of(SCHEMES, "weight quantization"), default="w8a8",
                    help="the weight scheme of the profiled step (default w8a8)")
    ap.add_argument("--wrapper", choices=WRAPPERS, default="cpp",
                    help="what calls the compiled graph's kernels (default cpp, as the side-by-side's run)")
    ap.add_argument("--repeats", type=positive_int, default=5, help="bare decodes timed (median; default 5)")
    add_out(ap)
    args = ap.parse_args(argv)
    import torch._inductor.config as inductor

    torch.set_num_threads(2)
    inductor.cpp.enable_kernel_profile = True  # inductor's kernels recorded under their own names
    _, tok = load_model_and_tokenizer("smollm2")
    prompt = text_ids(tok, "kjv", PROMPT, "--text").tolist()
    side = Compiled(Attnlab(f"attnlab {args.scheme}", prompt), args.wrapper)  # compiles here, before any timing
    figures = {"scheme": args.scheme, "wrapper": args.wrapper}
    with recorded(args.out, figures):
        bare = statistics.median(1e3 / side.decode()[0] for _ in range(args.repeats))  # ms a step
        seconds, calls, ops = profiled(side)
        steps = STEPS - 1  # decode() times the greedy steps after the prefill's
        total = sum(seconds.values()) * 1e3 / steps
        print(f"# {machine()}; SmolLM2-135M {args.scheme}, compiled step ({args.wrapper} wrapper), batch 1, "
              f"{PROMPT} prompt ids then {STEPS} greedy tokens\n")
        print(f"A step timed bare: {bare:.2f} ms (median of {args.repeats} decodes); profiled: {total:.2f} ms.\n")
        print("| part | ms a step (profiled) | share of the profiled step | ops a step |")
        print("|---|---:|---:|---:|")
        order = sorted(seconds, key=seconds.get, reverse=True)
        for p in order:
            ms = seconds[p] * 1e3 / steps
            print(f"| {p} | {ms:.2f} | {ms / total:.0%} | {calls[p] / steps:.1f} |")
        print(f"\nThe {TOP} ops of most self time:\n")
        print("| op | part | ms a step | calls a step |")
        print("|---|---|---:|---:|")
        for name, sec, n in ops[:TOP]:
            print(f"| `{name[:70]}` | {part(name)} | {sec * 1e3 / steps:.2f} | {n / steps:.1f} |")
        figures.update(bare_ms=bare, profiled_ms=total,
                       parts={p: {"ms": seconds[p] * 1e3 / steps, "ops": calls[p] / steps} for p in order})
    return 0


if __name__ == "__main__":
    sys.exit(main())
