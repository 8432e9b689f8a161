"""What two levers on the compiled step's own calls give: SmolLM2-135M at batch 1 under a weight scheme (default
w8a8), its step compiled as benchmarks/bench_llamacpp.py compiles it (C++ wrapper), the same 256 prompt ids
then 128 greedy tokens, each variant its own model and graph, turns alternating in one process:

- as shipped: attnlab.models.compiled's step, twice (the second copy is the control: what two identical
  steps differ by here is the noise every other ratio carries)
- freezing: inductor's freezing, the weights the graph's constants rather than its inputs (no bytecode
  gathering them before each call)
- fused siblings: the projections that read the same input as one product -- q, k and v one integer product,
  gate and up another (vLLM's merged QKV and gate-up projections): 120 calls of the kernel a step where there
  were 210, each reading a longer weight. Benchmark-only: the first sibling's forward computes the product of
  all, the others return their slices (Llama calls q, k, v and gate, up in that order); the logits are checked
  against the shipped step's
- both

Each variant's first compiled step's logits are compared with the shipped step's (max abs difference), and its
127 greedy tokens with the shipped step's.

Why: bench_step_profile.py finds the compiled W8A8 step's time outside the integer kernel mostly in calling
the graph, not in the loops it fused; these are the levers on that part that PyTorch's compiler offers or a
model's projections allow. Each ratio is the shipped step's time over the variant's in the same turn, with
the sign test's interval of the median (bench_llamacpp.paired).

    python benchmarks/bench_step_levers.py --repeats 12 --out benchmarks/results/step-levers-w8a8
"""
from __future__ import annotations

import statistics
import sys

import torch
from bench_llamacpp import PROMPT, STEPS, Attnlab, Compiled, paired  # benchmarks/bench_llamacpp.py

from attnlab.core import weights
from attnlab.evals.inputs import text_ids
from attnlab.models import arch
from attnlab.models.pretrained import load_model_and_tokenizer
from attnlab.quant.schemes import SCHEMES

from host import add_out, machine, one_of, parser, positive_int, recorded  # benchmarks/host.py

READS = {"met": "faster", "not met": "slower", "unresolved": "within the noise"}  # paired()'s status at goal 1
VARIANTS = ("as shipped", "as shipped (control)", "freezing", "fused siblings", "freezing + fused siblings")


class Siblings:
    """Projections that read one input, as one product: the first one's forward computes it, each returns its
    slice of the output units."""

    def __init__(self, mods: list):
        ws = [weights.of(m) for m in mods]
        first = ws[0]
        self.w = type(first)(torch.cat([w.q for w in ws]).contiguous(), torch.cat([w.scale for w in ws]).contiguous(),
                             first.n_in, first.smooth)  # (sum of outs, in): one weight, the rows of each in turn
        self.y = None
        lo = 0
        for i, (m, w) in enumerate(zip(mods, ws)):
            m.forward = self._forward(i, lo, lo + w.q.shape[0])
            lo += w.q.shape[0]

    def _forward(self, i: int, lo: int, hi: int):
        def forward(x: torch.Tensor) -> torch.Tensor:
            if i == 0:
                self.y = self.w.linear(x)  # (..., sum of outs)
            return self.y[..., lo:hi]
        return forward


def fuse_siblings(model) -> list[Siblings]:
    """Every layer's q/k/v and gate/up as Siblings (their bias-free int8 weights, as SmolLM2's are)."""
    fused = []
    for i in range(len(arch.layers(model))):
        a, m = arch.attention(model, i), arch.mlp(model, i)
        fused += [Siblings([a.q, a.k, a.v]), Siblings([m.gate_proj, m.in_proj])]
    return fused


def build(variant: str, scheme: str, prompt: list[int]) -> Compiled:
    """The variant's compiled step over a model of its own, compiled now (before any timing)."""
    import torch._inductor.config as inductor

    side = Attnlab(f"attnlab {scheme}", prompt)
    if "fused" in variant:
        fuse_siblings(side.model)
    with inductor.patch(freezing="freezing" in variant):  # read when the step compiles: in Compiled's first decode
        return Compiled(side, "cpp")


def first_step(side: Compiled) -> torch.Tensor:
    """(1, vocab) logits of the compiled step after the prefill (the prefill itself runs eager)."""
    side.dec.prefill(side.prompt)
    return side.dec.step(side.prompt[:, -1:])


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--scheme", type=one_of(SCHEMES, "weight quantization"), default="w8a8",
                    help="the weight scheme of every variant (default w8a8)")
    ap.add_argument("--repeats", type=positive_int, default=12, help="turns of every variant (default 12)")
    add_out(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    _, tok = load_model_and_tokenizer("smollm2")
    prompt = text_ids(tok, "kjv", PROMPT, "--text").tolist()
    sides = {v: build(v, args.scheme, prompt) for v in VARIANTS}
    figures = {"scheme": args.scheme, "repeats": args.repeats, "variants": {}}
    with recorded(args.out, figures):
        speeds, tokens = {v: [] for v in VARIANTS}, {}
        for _ in range(args.repeats):
            for v in VARIANTS:
                tps, tokens[v] = sides[v].decode()  # tokens/s over the greedy steps after the prefill's
                speeds[v].append(tps)
        ms = {v: [1e3 / tps for tps in speeds[v]] for v in VARIANTS}
        base = VARIANTS[0]
        logits = {v: first_step(sides[v]) for v in VARIANTS}
        print(f"# {machine()}; SmolLM2-135M {args.scheme}, compiled step (C++ wrapper), batch 1, {PROMPT} prompt "
              f"ids then {STEPS} greedy tokens, {args.repeats} turns\n")
        print(f"| variant | ms a step (median) | speed vs {base}, turn by turn | interval of the median | "
              "reads | max abs logit difference | same tokens |")
        print("|---|---:|---:|---|---|---:|---|")
        for v in VARIANTS:
            p = paired(speeds[v], speeds[base], goal=1.0)
            diff = float((logits[v] - logits[base]).abs().max())
            same = tokens[v] == tokens[base]
            print(f"| {v} | {statistics.median(ms[v]):.2f} | {p['median']:.3f}x | {p['low']:.3f} to {p['high']:.3f} "
                  f"({p['level']:.1%}) | {READS[p['status']] if v != base else '--'} | {diff:.2e} | {same} |")
            figures["variants"][v] = {"ms": statistics.median(ms[v]), "paired": p, "max_logit_diff": diff,
                                      "same_tokens": same}
    return 0


if __name__ == "__main__":
    sys.exit(main())
