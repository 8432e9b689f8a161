"""The line-break fix's effect: SmolLM2's perplexity on the first 2,048 tokens of each local text, with the
text's lines joined as they were before 2026-11-24 (nothing between them) and as ``text_ids`` now joins them
(one line break per line).

    python benchmarks/line_breaks.py        # ~1 minute on the 2-core CPU
"""
from __future__ import annotations

import torch

from attnlab.data.sources import read_corpus
from attnlab.evals.inputs import load_model
from attnlab.sparsity.measure import perplexity

TEXTS = ("wikitext-2/test.txt", "kjv", "war-and-peace")


def main() -> int:
    model, tok = load_model("smollm2", "cpu")
    for text in TEXTS:
        lines = read_corpus(text, "text")[:3000]  # enough lines for 2,048 tokens of each
        ppl = {}
        for name, sep in (("run together", ""), ("line breaks kept", "\n")):
            ids = torch.tensor(tok(sep.join(lines), add_special_tokens=False)["input_ids"][:2048])
            ppl[name] = perplexity(model, ids, 512)
        print(f"{text}: " + ", ".join(f"{k} {v:.2f}" for k, v in ppl.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
