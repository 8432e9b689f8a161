"""attnlab against llama.cpp on this CPU: SmolLM2's decode tokens/s at batch 1, the same weights, the same 256
prompt token ids then 128 greedy tokens, the configurations taking turns in one process.

llama.cpp is a benchmark's peer, never a dependency: llama-cpp-python is built from its source distribution in
a venv of its own, beside an editable attnlab (its pins do not clash with ours). Its GGUFs are made from the
same weights: the Q4_1 file attnlab's ``models fetch`` de-quantizes (the float folder is that file's weights
in float32), and F32, BF16 and Q8_0 converted from the float folder by llama.cpp's own converter.

    python3 -m venv L && L/bin/pip install -e . && L/bin/pip install --no-binary llama-cpp-python \\
        llama-cpp-python==0.3.36                         # builds llama.cpp for this CPU (~10 min on 2 cores)
    L/bin/pip install sentencepiece                      # the converter reads SmolLM2's tokenizer with it
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
    L/bin/python benchmarks/bench_llamacpp.py gguf --dir ggufs --llama-cpp llama_cpp_python-0.3.36/vendor/llama.cpp
                                                                   # the four GGUFs (~1 GB; not committed)
    L/bin/python benchmarks/bench_llamacpp.py run --dir ggufs --out benchmarks/results/bench-llamacpp

Each turn prefills the prompt afresh and times the greedy steps after the first: decode tokens/s. attnlab runs
its models (fp32, bf16, weight-only int8, W8A8: int8 activations too, the kind Q8_0 is, SmoothQuant: W8A8
calibrated on a text, and W8A8x2: each activation as two int8 slices, weight-only int8's precision through W8A8's
integer kernel) three ways: eager
as ``attnlab stream`` does (transformers' Llama, DynamicCache); compiled
(attnlab.models.compiled: a static cache and the step compiled once, before the turns); and its ceiling, the
step's projections alone through the same kernels (a step with nothing else in it). 2 torch threads;
llama.cpp with ``n_threads=2``. Medians over the repeats; the ratios are taken within this one run.

Each row's bandwidth ledger (attnlab.core.ledger): the bytes a step reads (attnlab: its weights at their
stored bytes and its cache, the static one whole; llama.cpp: its GGUF file and an f16 cache), the roofline
tokens/s at the copy bandwidth measured in the same run, and the yield, measured over roofline.
"""
from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnlab.models.compiled import WRAPPERS, CompiledDecode

from host import add_out, machine, parser, positive_int, recorded  # benchmarks/host.py

PROMPT, STEPS = 256, 128
GOAL = 0.8  # issue 56: attnlab int8 >= 0.8x llama.cpp Q8_0
# attnlab's weight schemes run here: weight-only int8 (bf16 activations), W8A8 (int8 activations too, as Q8_0), and
# SmoothQuant (W8A8 with calibrated smoothing: it reads the methods' default calibration text, never the prompt's)
SCHEMES_RUN = ("int8", "w8a8", "smoothquant", "w8a8x2")
LLAMA = {"F32": "f32", "BF16": "bf16", "Q8_0": "q8_0"}  # converter out-types; Q4_1 is the fetched file


def make_ggufs(folder: Path, vendor: Path) -> None:
    """The four GGUFs of SmolLM2 in ``folder``: Q4_1 from the wheel attnlab fetches, the rest converted by the
    converter of the llama.cpp source tree ``vendor``."""
    from attnlab.models.fetch import _download_wheel, _extract_gguf
    from attnlab.models.known import KNOWN
    from attnlab.models.pretrained import load_model_and_tokenizer

    spec = KNOWN["smollm2"]
    if not (folder / "Q4_1.gguf").exists():
        _extract_gguf(spec, _download_wheel(spec, folder / "wheel", print), folder / "q4_1", print)
        (folder / "q4_1" / spec.gguf_name).rename(folder / "Q4_1.gguf")
    src = folder / "hf"
    if not src.exists():
        model, tok = load_model_and_tokenizer("smollm2")
        model.save_pretrained(src)
        tok.save_pretrained(src)
    if not (vendor / "convert_hf_to_gguf.py").exists():
        raise SystemExit(f"--llama-cpp {vendor}: no convert_hf_to_gguf.py there; give llama.cpp's source tree")
    for name, outtype in LLAMA.items():
        subprocess.run([sys.executable, str(vendor / "convert_hf_to_gguf.py"), str(src), "--outtype", outtype,
                        "--outfile", str(folder / f"{name}.gguf")], check=True,
                       env={"PYTHONPATH": str(vendor / "gguf-py"), "PATH": "/usr/bin:/bin"})


def kv_per_position(model, element_size: int | None = None) -> int:
    """Bytes one cached position holds across the layers (keys and values) at the model's dtype, or
    ``element_size`` bytes an element."""
    from attnlab.models import arch

    d = arch.dims(model)
    size = element_size or next(model.parameters()).element_size()
    return d.n_layers * 2 * d.n_kv_heads * d.head_dim * size


class Attnlab:
    """attnlab's decode as ``attnlab stream`` runs it: transformers' Llama, a DynamicCache, eager."""

    def __init__(self, name: str, prompt: list[int]):
        from transformers import DynamicCache

        from attnlab.evals.inputs import text_ids
        from attnlab.methods.base import CALIBRATION_TEXT, CALIBRATION_TOKENS
        from attnlab.models.pretrained import load_model_and_tokenizer
        from attnlab.quant.schemes import SCHEMES
        from attnlab.quant.transform import QuantizedWeights

        self.name, self.prompt, self.cache_cls = name, torch.tensor([prompt]), DynamicCache
        self.model, tok = load_model_and_tokenizer("smollm2")
        if "bf16" in name:
            self.model.to(torch.bfloat16)
        # the scheme is the name's last word (attnlab int8, attnlab w8a8); fp32 and bf16 take none
        self.scheme_name = next((q for q in SCHEMES_RUN if name.endswith(q)), None)
        self.scheme = None
        if self.scheme_name:
            calibrated = SCHEMES.get(self.scheme_name).calibrated
            calib = text_ids(tok, CALIBRATION_TEXT, CALIBRATION_TOKENS) if calibrated else None
            self.scheme = QuantizedWeights(self.model, self.scheme_name, calibration=calib).__enter__()

    def bytes_per_token(self) -> tuple[int, float]:
        """(weight bytes, KV bytes) one decode step reads: the cache's mean over the timed steps."""
        from attnlab.core.ledger import weight_bytes

        return weight_bytes(self.model), kv_per_position(self.model) * (PROMPT + STEPS / 2)

    @torch.no_grad()
    def decode(self) -> tuple[float, list[int]]:
        cache = self.cache_cls(config=self.model.config)
        out = self.model(self.prompt, past_key_values=cache, logits_to_keep=1)
        new = [int(out.logits[0, -1].argmax())]
        t0 = time.perf_counter()
        while len(new) < STEPS:
            out = self.model(torch.tensor([new[-1:]]), past_key_values=cache, logits_to_keep=1)
            new.append(int(out.logits[0, -1].argmax()))
        return (STEPS - 1) / (time.perf_counter() - t0), new


class Compiled:
    """The same model (the eager side's, its weights as they are) through attnlab.models.compiled: a static
    cache and the step compiled once, here, before the turns (so no turn times the compile)."""

    def __init__(self, eager: Attnlab, wrapper: str):
        self.name, self.prompt, self.eager = f"{eager.name} compiled", eager.prompt, eager.name
        self.dec = CompiledDecode(eager.model, max_len=PROMPT + STEPS, wrapper=wrapper)
        t0 = time.perf_counter()
        self.decode()
        self.compile_s = time.perf_counter() - t0
        self.weights = eager.bytes_per_token()[0]

    def bytes_per_token(self) -> tuple[int, float]:
        return self.weights, self.dec.kv_bytes()  # the static cache: every position read every step

    def decode(self) -> tuple[float, list[int]]:
        logits = self.dec.prefill(self.prompt)
        new = [int(logits[0].argmax())]
        t0 = time.perf_counter()
        while len(new) < STEPS:
            new.append(int(self.dec.step(torch.tensor([new[-1:]]))[0].argmax()))
        return (STEPS - 1) / (time.perf_counter() - t0), new


class Projections:
    """The ceiling of an attnlab configuration: its step's projections alone, every weight the step reads
    through the same kernel (bench_decode's chain), STEPS - 1 times; no step of it can be faster."""

    def __init__(self, eager: Attnlab):
        from bench_decode import chain  # benchmarks/bench_decode.py

        self.name, self.eager = f"{eager.name} projections alone", eager.name
        dtype = next(eager.model.parameters()).dtype
        self.chain = chain(eager.model, eager.scheme_name, 1, dtype)
        self.weights = eager.bytes_per_token()[0]

    def bytes_per_token(self) -> tuple[int, float]:
        return self.weights, 0  # the products alone: no cache

    def decode(self) -> tuple[float, None]:
        t0 = time.perf_counter()
        for _ in range(STEPS - 1):
            self.chain()
        return (STEPS - 1) / (time.perf_counter() - t0), None


class LlamaCpp:
    def __init__(self, name: str, path: Path, prompt: list[int], kv_f16: int):
        import llama_cpp

        self.name, self.prompt, self.kv_f16 = name, prompt, kv_f16
        self.llm = llama_cpp.Llama(str(path), n_threads=2, n_threads_batch=2, n_ctx=PROMPT + STEPS + 16,
                                   n_batch=PROMPT, verbose=False)
        self.file_bytes = path.stat().st_size

    def bytes_per_token(self) -> tuple[int, float]:
        """(the GGUF's bytes: its weights and a tokenizer's MB or two, KV bytes: llama.cpp's default f16
        cache at the mean position of the timed steps)."""
        return self.file_bytes, self.kv_f16 * (PROMPT + STEPS / 2)

    def decode(self) -> tuple[float, list[int]]:
        self.llm.reset()
        new, t0 = [], None
        for tok in self.llm.generate(self.prompt, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            new.append(tok)
            if len(new) == 1:
                t0 = time.perf_counter()  # the prompt is in and the first token out
            if len(new) == STEPS:
                break
        return (STEPS - 1) / (time.perf_counter() - t0), new


def report(figures: dict, sides: list, speeds: dict, tokens: dict, bandwidth: float) -> None:
    """The table (printed and into ``figures``) and the goal: attnlab int8, eager or compiled, >= 0.8x llama.cpp
    Q8_0; beside it the ceiling, the int8 projections alone (what a step with nothing else in it would run). The
    same for W8A8 and SmoothQuant where the run has them."""
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + written, measured after the turns)\n")
    print("| configuration | tokens/s | x attnlab fp32 | x llama.cpp Q8_0 | MiB a token | roofline | yield |\n"
          "|---|---|---|---|---|---|---|")
    med = {k: statistics.median(v) for k, v in speeds.items()}
    rows = figures["rows"] = []
    for s in sides:
        v, own = med[s.name], tokens[s.name]
        rows.append({"config": s.name, "tokens_per_s": v, "x_attnlab_fp32": v / med["attnlab fp32"],
                     "x_llamacpp_q8_0": v / med["llama.cpp Q8_0"], "runs": speeds[s.name],
                     "same_tokens_as_fp32": None if own is None else own == tokens["attnlab fp32"]})
        if isinstance(s, Compiled):  # the compiled step writes its eager twin's tokens
            rows[-1] |= {"same_tokens_as_eager": own == tokens[s.eager], "compile_s": s.compile_s}
        w, kv = s.bytes_per_token()
        led = rows[-1]["ledger"] = {"weight_bytes": w, "kv_bytes": kv, "bytes_per_token": w + kv,
                                    "roofline_tokens_per_s": bandwidth / (w + kv), "yield": v * (w + kv) / bandwidth}
        print(f"| {s.name} | {v:.1f} | {v / med['attnlab fp32']:.2f} | {v / med['llama.cpp Q8_0']:.2f} | "
              f"{(w + kv) / 2**20:.1f} | {led['roofline_tokens_per_s']:.0f} | {led['yield']:.0%} |")
    for scheme in SCHEMES_RUN:  # "goal": weight-only int8's; "goal_w8a8" etc.: the others' (runs that have them)
        if f"attnlab {scheme}" in med:
            figures["goal" if scheme == "int8" else f"goal_{scheme}"] = _goal(scheme, med, speeds)


def _goal(scheme: str, med: dict, speeds: dict) -> dict:
    """The goal for one scheme: its faster side (eager or compiled) over llama.cpp Q8_0, turn by turn."""
    best = max((f"attnlab {scheme}", f"attnlab {scheme} compiled"), key=med.get)
    ceiling = med[f"attnlab {scheme} projections alone"] / med["llama.cpp Q8_0"]
    goal, turns = med[best] / med["llama.cpp Q8_0"], paired(speeds[best], speeds["llama.cpp Q8_0"], GOAL)
    print(f"\n{best} at {goal:.2f}x llama.cpp Q8_0 (medians); turn by turn {turns['median']:.2f}x, "
          f"{turns['low']:.2f} to {turns['high']:.2f} over {turns['n']} turns ({turns['level']:.0%} interval of "
          f"the median): goal >= {GOAL}x {turns['status']}; its projections alone at {ceiling:.2f}x (a step with "
          f"nothing but its {scheme} products)")
    return {"best": best, "int8_x_q8_0": goal, "goal": GOAL, "met": goal >= GOAL,
            "projections_alone_x_q8_0": ceiling, "reachable": ceiling >= GOAL, "paired": turns}


def paired(a: list[float], b: list[float], goal: float, level: float = 0.95) -> dict:
    """a's speed over b's, turn by turn (a turn's two runs are minutes apart at most, so the host's slower and
    faster spells fall on both), with the sign test's interval of their median: the k-th lowest and k-th
    highest of n ratios bound it with probability 1 - 2 P(Binomial(n, 1/2) < k) whatever their distribution,
    k the largest that keeps ``level`` (k = 1, the extremes, when none does: 94% for 5 turns). The goal is met
    when the interval's low end reaches it, not met when its high end falls short, and unresolved between."""
    ratios = sorted(x / y for x, y in zip(a, b))
    n = len(ratios)
    cover = [1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n for k in range(1, max(n // 2, 1) + 1)]
    k = max([k for k, c in enumerate(cover, 1) if c >= level], default=1)
    low, high = ratios[k - 1], ratios[n - k]
    status = "met" if low >= goal else "not met" if high < goal else "unresolved"
    return {"ratios": ratios, "median": statistics.median(ratios), "low": low, "high": high, "n": n,
            "level": cover[k - 1], "status": status}


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("step", choices=["gguf", "run"], help="gguf: make the GGUFs; run: the side-by-side")
    ap.add_argument("--dir", type=Path, default=Path("ggufs"), help="the GGUFs' folder (default ggufs)")
    ap.add_argument("--llama-cpp", type=Path, default=Path("llama_cpp_python-0.3.36/vendor/llama.cpp"),
                    help="llama.cpp's source tree, for its converter (gguf step)")
    ap.add_argument("--repeats", type=positive_int, default=5, help="turns of every configuration (default 5)")
    ap.add_argument("--wrapper", choices=WRAPPERS, default="python",
                    help="what calls the compiled step's kernels: inductor's Python (default) or its C++ wrapper "
                    "(compiles for minutes more, once; a faster step)")
    add_out(ap)
    args = ap.parse_args(argv)
    if args.step == "gguf":
        make_ggufs(args.dir, args.llama_cpp)
        return 0
    missing = [n for n in ("F32", "BF16", "Q8_0", "Q4_1") if not (args.dir / f"{n}.gguf").exists()]
    if missing:
        ap.error(f"--dir {args.dir}: no {', '.join(m + '.gguf' for m in missing)}; make them first with the gguf step")
    torch.set_num_threads(2)
    from attnlab.core.ledger import copy_bandwidth
    from attnlab.evals.inputs import text_ids
    from attnlab.models.pretrained import load_model_and_tokenizer

    _, tok = load_model_and_tokenizer("smollm2")
    prompt = text_ids(tok, "kjv", PROMPT, "--text").tolist()
    eager = [Attnlab(f"attnlab {n}", prompt) for n in ("fp32", "bf16") + SCHEMES_RUN]
    sides = eager + [Compiled(e, args.wrapper) for e in eager] + [Projections(e) for e in eager]
    kv_f16 = kv_per_position(eager[0].model, 2)  # a position's f16 keys and values, llama.cpp's default cache
    sides += [LlamaCpp(f"llama.cpp {n}", args.dir / f"{n}.gguf", prompt, kv_f16)
              for n in ("F32", "BF16", "Q8_0", "Q4_1")]
    with recorded(args.out, figures := {"wrapper": args.wrapper}):
        speeds, tokens = {s.name: [] for s in sides}, {}
        for _ in range(args.repeats):
            for s in sides:
                tps, tokens[s.name] = s.decode()
                speeds[s.name].append(tps)
        print(f"# {machine()}; SmolLM2-135M, batch 1, {PROMPT} prompt ids then {STEPS} greedy tokens, "
              f"{args.repeats} turns each; decode tokens/s (median)\n")
        figures["bandwidth_bytes_per_s"] = bandwidth = copy_bandwidth()
        report(figures, sides, speeds, tokens, bandwidth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
