"""A page for every architecture the adapter knows (grouped-query llama, partial-rotary gpt_neox, gpt2 and
opt with learned positions): the grid's shape is the model's, each head's map is its traced attention."""
import numpy as np
import pytest

from attnlab.view.build import build_view, policies_for
from attnlab.view.pack import quantise, unblob, unpack_head
from tiny_models import ARCHS, random_ids, traced
from view.conftest import page_data

T = 24


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_gets_its_grid_maps_and_replays(tiny_models, byte_tok, arch):
    model = tiny_models[arch]
    ids = random_ids(T, seed=3)
    policies = policies_for(("window", "h2o"), (8,), 4)
    d = page_data(build_view(model, byte_tok, ids, policies, 4, {"model": arch, "text": "random ids"}))
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert (d["layers"], d["heads"], d["T"]) == (layers, heads, T)
    tr = traced(model, ids, ["blocks.*.attn.pattern"])
    mask, values = unblob(d["attention"]["mask"]), unblob(d["attention"]["values"])
    for layer in range(layers):
        q, _ = quantise(tr[f"blocks.{layer}.attn.pattern"][0])
        for h in range(heads):
            assert np.array_equal(unpack_head(mask, values, d["attention"]["counts"], layer * heads + h, T), q[h])
    assert [r["label"] for r in d["replays"]] == ["window 0+8", "h2o 4 heavy+4 recent"]
