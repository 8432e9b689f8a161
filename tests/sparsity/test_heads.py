"""SparseHeads on tiny random models: the identity at keep 1, the smallest-norm heads zeroed before the output
projection (checked against a trace of attn.z), hooks removed on exit, bad input refused."""
import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.sparsity.heads import SparseHeads
from attnlab.sparsity.mlp import SparseMLP, SparsityRecord
from attnlab.sparsity.rules import Oracle
from tiny_models import ARCHS, V


def _ids(b=2, t=12) -> torch.Tensor:
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(0))


def _hooks(model) -> frozenset:
    """Every forward (pre-)hook on the model (transformers may leave its own on a shared model)."""
    return frozenset((name, kind, key) for name, m in model.named_modules()
                     for kind in ("_forward_hooks", "_forward_pre_hooks") for key in getattr(m, kind))


@pytest.mark.parametrize("name", ARCHS)
def test_keeping_every_head_is_the_identity(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    with torch.no_grad():
        dense = model(ids).logits
        with SparseHeads(model, 1.0):
            assert torch.equal(model(ids).logits, dense)


@pytest.mark.parametrize("name", ARCHS)
def test_the_smallest_norm_heads_are_zeroed_before_the_output_projection(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    n = len(arch.layers(model))
    # the outer trace's hook runs before SparseHeads' (registered first), the inner one's after
    with torch.no_grad(), Trace(model, "blocks.*.attn.z") as before, SparseHeads(model, 0.5), \
            Trace(model, "blocks.*.attn.z") as after:
        model(ids)
    for i in range(n):
        z, z_sparse = before[f"blocks.{i}.attn.z"], after[f"blocks.{i}.attn.z"]  # (B, T, H, d_h)
        norms = z.norm(dim=-1)  # (B, T, H)
        kept = z_sparse.abs().sum(-1) > 0
        assert (kept.sum(-1) == z.shape[2] // 2).all()
        smallest_kept = norms.masked_fill(~kept, float("inf")).min(-1).values
        largest_dropped = norms.masked_fill(kept, float("-inf")).max(-1).values
        assert (smallest_kept >= largest_dropped).all()
        assert torch.equal(z_sparse, z * kept[..., None])


def test_only_the_selected_layers_lose_heads(tiny_models):
    model, ids = tiny_models["llama"], _ids()
    with torch.no_grad(), Trace(model, "blocks.*.attn.z") as dense:
        model(ids)
    with torch.no_grad(), SparseHeads(model, 0.25, layers=[1]), Trace(model, "blocks.*.attn.z") as sparse:
        model(ids)
    assert torch.equal(sparse["blocks.0.attn.z"], dense["blocks.0.attn.z"])
    assert ((sparse["blocks.1.attn.z"].abs().sum(-1) > 0).sum(-1) == 1).all()


@pytest.mark.parametrize("name", ARCHS)
def test_hooks_are_removed_on_exit_also_when_the_block_raises(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    before = _hooks(model)
    with torch.no_grad():
        dense = model(ids).logits
        with pytest.raises(RuntimeError, match="inside"), SparseHeads(model, 0.5):
            assert _hooks(model) != before
            raise RuntimeError("inside")
        assert _hooks(model) == before and torch.equal(model(ids).logits, dense)


def test_composes_with_sparse_mlp(tiny_models):
    model, ids = tiny_models["gpt_neox"], _ids()
    with torch.no_grad():
        dense = model(ids).logits
        with SparseHeads(model, 1.0), SparseMLP(model, Oracle(1.0)):
            assert torch.equal(model(ids).logits, dense)
        with SparseHeads(model, 0.5):
            heads_only = model(ids).logits
        with SparseHeads(model, 0.5), SparseMLP(model, Oracle(0.5)):
            both = model(ids).logits
    assert not torch.allclose(both, heads_only)


@pytest.mark.parametrize("name", ARCHS)
def test_the_record_counts_heads_kept_and_their_share_of_the_output_norm(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    for keep in (0.5, 1.0):
        rec = SparsityRecord()
        with torch.no_grad(), SparseHeads(model, keep, record=rec):
            model(ids)
        assert rec.layers("heads") == [0, 1] and rec.kept_fraction(what="heads") == keep
        assert keep <= rec.mass(what="heads") <= 1 and (rec.mass(what="heads") == 1) == (keep == 1)


@pytest.mark.parametrize("keep, layers, message", [
    (0, None, r"keep fraction 0: give a number in \(0, 1\]"),
    (1.5, None, r"keep fraction 1.5: give a number in \(0, 1\]"),
    (-1, None, r"keep fraction -1: give a number in \(0, 1\]"),
    (0.5, [3], r"layer index 3 is out of range: this model has 2 layers"),
])
def test_bad_input_is_one_line(tiny_models, keep, layers, message):
    with pytest.raises(UsageError, match=message) as e:
        SparseHeads(tiny_models["llama"], keep, layers=layers)
    assert "\n" not in str(e.value)
