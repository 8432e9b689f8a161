"""Parity with NVIDIA kvpress: the presses attnlab shares with it, on the same prompts at the same compression
ratios in kvpress's regime (the context compressed once after its prefill), compared kept set against kept set
for every layer and KV head.

kvpress 0.5.5 needs transformers < 5.3, so it runs in a venv of its own and is never a dependency of attnlab
(the recipe: ``python3 -m venv K && K/bin/pip install torch==2.13.0 kvpress==0.5.5 "transformers<5.3"``):

    python benchmarks/kvpress_parity.py prompts --out OUT                         # attnlab's venv: the prompts
    PYTHONPATH=src K/bin/python benchmarks/kvpress_parity.py kvpress --out OUT    # kvpress's kept sets
    python benchmarks/kvpress_parity.py attnlab --out OUT                         # attnlab's, and the comparison

The pairs: StreamingLLMPress ~ ``sinks`` (4 sinks); SnapKVPress (window 64, kernel 5) ~ ``snapkv:window=64``;
TOVAPress ~ ``tova``; KeyDiffPress ~ ``keydiff``; ObservedAttentionPress ~ ``h2o:recent=0``. Known differences,
stated before the run: kvpress's ObservedAttention divides each key's attention sum by the number of queries that
see it (a mean), where H2O sums; kvpress's TOVA always keeps the last token, attnlab's TOVA keeps it only when its
score does. Both sides load the same SmolLM2 folder in float32, eager attention.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

RATIOS = (0.25, 0.5, 0.75, 0.875)
PAIRS = {"StreamingLLMPress": ("sinks", {}), "SnapKVPress": ("snapkv", {"window": 64}), "TOVAPress": ("tova", {}),
         "KeyDiffPress": ("keydiff", {}), "ObservedAttentionPress": ("h2o", {"recent": 0})}


def _model_folder() -> str:
    from attnlab.models.pretrained import resolve_model

    return str(resolve_model("smollm2"))


def prompts(out: Path, n: int, length: int) -> None:
    """The contexts of ``n`` niah_single items of ``length`` tokens, as token ids (BOS first)."""
    from attnlab.data.sources import read_corpus
    from attnlab.evals.inputs import load_model
    from attnlab.leaderboard.harness import ids_of, token_count
    from attnlab.leaderboard.tasks import haystack_from, make_items

    _, tok = load_model("smollm2")
    hay = haystack_from(read_corpus("war-and-peace/warpeace.txt", "haystack"))
    items = make_items("niah_single", hay, token_count(tok), length, n)
    write(out / "prompts.json", {"model": _model_folder(), "contexts": [ids_of(tok, i)[0] for i in items]})


def kvpress_side(out: Path) -> None:
    """kvpress's kept indices: each press's scores recorded as its compress step computes them."""
    import kvpress
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    spec = _read(out, "prompts.json", "prompts")
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32, attn_implementation="eager")
    kept: dict = {}
    for press_name in PAIRS:
        for ratio in RATIOS:
            press = getattr(kvpress, press_name)(compression_ratio=ratio)
            if press_name == "SnapKVPress":
                press.window_size, press.kernel_size = 64, 5
            for i, ids in enumerate(spec["contexts"]):
                layers: dict[int, list] = {}
                score = press.score

                def recording(module, hidden_states, keys, values, attentions, kwargs, score=score, layers=layers):
                    s = score(module, hidden_states, keys, values, attentions, kwargs)  # (1, Hkv, T)
                    n_kept = max(1, int(keys.shape[2] * (1 - ratio)))
                    layers[module.layer_idx] = s.topk(n_kept, dim=-1).indices.sort(-1).values[0].tolist()
                    return s

                press.score = recording
                with torch.no_grad(), press(model):
                    model(torch.tensor([ids]), past_key_values=DynamicCache(),
                          output_attentions=press_name == "ObservedAttentionPress")
                kept[f"{press_name}/{ratio}/{i}"] = [layers[j] for j in sorted(layers)]
        print(press_name, "done", file=sys.stderr)
    import transformers
    write(out / "kvpress.json", {"kvpress": kvpress.__version__ if hasattr(kvpress, "__version__") else "0.5.5",
                                 "transformers": transformers.__version__, "kept": kept})


def attnlab_side(out: Path) -> dict:
    """attnlab's kept sets for the same prompts (the prefill regime), and the comparison with kvpress's."""
    import torch

    from attnlab.evals.inputs import load_model
    from attnlab.kv.cache import PolicyCache
    from attnlab.kv.policies import make_policy
    from attnlab.leaderboard.regimes import in_regime, kept_tokens

    spec, theirs = _read(out, "prompts.json", "prompts"), _read(out, "kvpress.json", "kvpress")
    model, _ = load_model("smollm2")
    model.set_attn_implementation("eager")
    rows = {}
    for press_name, (policy, options) in PAIRS.items():
        same = total = 0
        jaccard = []
        for ratio in RATIOS:
            for i, ids in enumerate(spec["contexts"]):
                n = len(ids)
                once = in_regime(make_policy(policy, kept_tokens(ratio, n), **options), "prefill", n)
                cache = PolicyCache(model, once)
                with torch.no_grad(), cache:
                    model(torch.tensor([ids]), past_key_values=cache)
                    model(torch.tensor([ids[-1:]]), past_key_values=cache)  # the next token: the one compression
                for layer, heads in enumerate(theirs["kept"][f"{press_name}/{ratio}/{i}"]):
                    held = cache.kept_mask(layer, n)[0]  # (H_kv, n)
                    for h, kv in enumerate(heads):
                        mine = set(held[h].nonzero().flatten().tolist())
                        total += 1
                        same += mine == set(kv)
                        jaccard.append(len(mine & set(kv)) / len(mine | set(kv)))
        rows[press_name] = {"attnlab": policy + "".join(f":{k}={v}" for k, v in options.items()),
                            "sets": total, "identical": same, "identical_share": same / total,
                            "mean_jaccard": sum(jaccard) / len(jaccard), "min_jaccard": min(jaccard)}
        print(press_name, rows[press_name], file=sys.stderr)
    return {"kvpress": theirs["kvpress"], "kvpress_transformers": theirs["transformers"], "ratios": list(RATIOS),
            "prompts": len(spec["contexts"]), "prompt_tokens": [len(c) for c in spec["contexts"]], "pairs": rows}


def _read(out: Path, name: str, side: str) -> dict:
    """``out/name``, written by the ``side`` step; its absence is one line naming that step."""
    if not (out / name).is_file():
        print(f"kvpress_parity.py: error: {out / name} is missing: run the {side} side first "
              f"(benchmarks/kvpress_parity.py {side} --out {out})", file=sys.stderr)
        sys.exit(2)
    return json.loads((out / name).read_text())


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def main() -> None:
    from host import parser, positive_int  # benchmarks/host.py

    p = parser(__doc__)
    p.add_argument("side", choices=("prompts", "kvpress", "attnlab"),
                   help="prompts (attnlab's venv), kvpress (kvpress's venv), attnlab (and the comparison)")
    p.add_argument("--out", type=Path, required=True, help="the folder the three sides share")
    p.add_argument("--n", type=positive_int, default=3, help="prompts (niah_single items)")
    p.add_argument("--length", type=positive_int, default=1024, help="tokens a prompt")
    args = p.parse_args()
    began = time.time()
    if args.side == "prompts":
        prompts(args.out, args.n, args.length)
    elif args.side == "kvpress":
        kvpress_side(args.out)
    else:
        from attnlab.core.machine import machine

        result = attnlab_side(args.out) | {"seconds": round(time.time() - began, 1)}
        command = "python benchmarks/kvpress_parity.py attnlab --out " + str(args.out)
        write(args.out / "result.json", {"command": command, "machine": machine(), "date": time.strftime("%Y-%m-%d"),
                                         **result})
        print(json.dumps(result["pairs"], indent=1))


if __name__ == "__main__":
    main()
