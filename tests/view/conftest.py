"""One page of a tiny llama over a made-up text, written by `attnlab view` once for the folder's tests, and
what Python computes for it independently of the page: the traced attention, quantised, and each policy's
kept sets from its own replay."""
import json
import re
from types import SimpleNamespace

import pytest
import torch

from attnlab.cli import main
from attnlab.models.pretrained import load_model_and_tokenizer
from attnlab.models.trace import Trace
from attnlab.view.pack import quantise
from tiny_models import save_hf

TEXT = "the cat sat on the mat and the dog ran to the cat. a bird flew over the river."
TOKENS, BUDGET, CHUNK = 48, 12, 3
POLICIES = ("window", "sinks", "h2o", "sinks+h2o")


def page_data(html: str) -> dict:
    """The JSON the page carries."""
    (payload,) = re.findall(r'<script type="application/json" id="attnlab-data">(.*?)</script>', html, re.S)
    return json.loads(payload)


@pytest.fixture(scope="session")
def view(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    folder, out = save_hf(root / "model"), root / "view.html"
    argv = ["view", "--model", str(folder), "--text", TEXT, "--tokens", str(TOKENS), "--policies", ",".join(POLICIES),
            "--budgets", str(BUDGET), "--chunk", str(CHUNK), "--out", str(out)]
    assert main(argv) == 0
    model, tok = load_model_and_tokenizer(str(folder))
    ids = torch.tensor(tok(TEXT, add_special_tokens=False)["input_ids"][:TOKENS])
    with torch.no_grad(), Trace(model, ["blocks.*.attn.pattern"]) as tr:
        model(ids[None])
    attention = torch.stack([tr[f"blocks.{i}.attn.pattern"][0] for i in range(model.config.num_hidden_layers)])
    q, scale = zip(*(quantise(a) for a in attention))  # per layer: (H, T, T) uint8, (H,)
    html = out.read_text(encoding="utf-8")
    return SimpleNamespace(path=out, html=html, data=page_data(html), model=model, tok=tok, ids=ids, folder=folder,
                           attention=attention, q=torch.stack(q), scale=torch.stack(scale), argv=argv)
