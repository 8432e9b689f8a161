"""JoMA hierarchical data (Theorem 5), the alignment score and the post-LN transformer."""
import math

import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.joma.alignment import alignment_score, cooccurrence, latent_correlations, pool_hidden
from attnlab.theory.joma.hierarchy import LatentTree, LatentTreeConfig, TopDownConfig, TopDownHierarchy
from attnlab.theory.joma.transformer import PostLNTransformer, TransformerConfig


# --------------------------------------------------------------------------- latent tree
@pytest.mark.parametrize("D,L,B", [(2, 2, 2), (3, 4, 2), (2, 3, 3), (2, 6, 2)])
def test_exact_preset_gives_one_minus_H_over_L_exactly(D, L, B):
    tree = LatentTree(LatentTreeConfig(num_classes=D, height=L, branching=B))
    H = tree.lca_height()
    assert tree.V == D * B ** (L - 1)
    torch.testing.assert_close(tree.cooccurrence_table(), 1 - H.double() / L, rtol=0, atol=1e-12)


def test_constant_preset_gives_power_law():
    L = 5
    tree = LatentTree(LatentTreeConfig(num_classes=2, height=L, preset="constant"))
    H = tree.lca_height()
    want = torch.where(H < L, (1 - 1 / L) ** H.double(), torch.zeros((), dtype=torch.float64))
    torch.testing.assert_close(tree.cooccurrence_table(), want, rtol=0, atol=1e-12)


def test_lca_height_symmetric_zero_diagonal_L_across_classes():
    tree = LatentTree(LatentTreeConfig(num_classes=3, height=4, branching=2))
    H = tree.lca_height()
    assert torch.equal(H, H.T)
    assert (H.diag() == 0).all()  # H(l, l) := 0, so P[l|l] = 1
    cls = torch.arange(tree.V) // tree.B ** (tree.L - 1)
    different = cls[:, None] != cls[None, :]
    assert (H[different] == tree.L).all() and (H[~different] < tree.L).all()
    assert H[0, 1] == 1 and H[0, 2] == 2 and H[0, 4] == 3  # siblings, cousins, same class only


@pytest.mark.parametrize("preset", ["exact", "constant"])
def test_sampled_cooccurrence_within_standard_errors(preset):
    tree = LatentTree(LatentTreeConfig(num_classes=2, height=3, branching=2, preset=preset))
    s = tree.sample(40_000, torch.Generator().manual_seed(0))
    assert s.tokens.shape == (40_000, tree.V) and [z.shape[1] for z in s.latents] == [2, 4]
    # class node on ⇔ its class; a child is on only under an on parent
    assert torch.equal(s.latents[0], torch.nn.functional.one_hot(s.labels, 2).bool())
    assert not (s.tokens & ~s.latents[1].repeat_interleave(2, 1)).any()
    P, count = cooccurrence(s.tokens)
    want = tree.cooccurrence_table()
    se = (want * (1 - want) / count[None, :]).sqrt().clamp_min(1e-12)
    assert ((P - want).abs() / se).max() < 5
    # the marginal P[l = 1] = (1/D) Π_{h<L} κ_h
    p_leaf = float(tree.keep.prod()) / tree.D
    assert abs(float(s.tokens.double().mean()) - p_leaf) < 5 * math.sqrt(p_leaf / s.tokens.numel())


def test_tree_deeper_than_vocabulary_refused():
    with pytest.raises(ConfigError, match="deeper than vocab_size=100"):
        LatentTreeConfig(num_classes=4, height=8, vocab_size=100)
    with pytest.raises(ConfigError, match="max_vocab"):
        LatentTreeConfig(num_classes=4, height=20)
    for bad in ({"height": 1}, {"num_classes": 1}, {"branching": 1}, {"preset": "linear"}):
        with pytest.raises(ConfigError):
            LatentTreeConfig(**bad)
    assert LatentTreeConfig(num_classes=4, height=5, vocab_size=64).num_leaves == 64


# --------------------------------------------------------------------------- top-down variant
def test_topdown_sequence_layout_and_latents():
    h = TopDownHierarchy(TopDownConfig())
    s = h.sample(500, torch.Generator().manual_seed(1))
    M, T = 100, 30
    assert s.x.shape == (500, T) and s.present.shape == (500, M)
    assert [z.shape for z in s.latents] == [(500, 10), (500, 20)]
    pad = s.x == h.pad_id
    assert torch.equal(pad, s.pad)
    n_tok = s.present.sum(1)
    assert (n_tok >= 1).all() and (n_tok <= h.cfg.max_tokens).all()
    # PAD only at the front: positions < T − n are pad, the rest are tokens
    assert torch.equal(pad, torch.arange(T)[None, :] < (T - n_tok)[:, None])
    # tokens present ⇔ active leaves, each once
    seen = torch.zeros(500, M + 1, dtype=torch.long).scatter_add_(1, s.x, torch.ones_like(s.x))[:, :M]
    assert torch.equal(seen.bool(), s.present) and seen.max() == 1
    # every active node of a level was picked by an active parent's combination
    levels = [torch.nn.functional.one_hot(s.y, 20).bool(), *s.latents, s.present]
    for combo, parent, child in zip(h.combos, levels[:-1], levels[1:]):
        reachable = (parent[:, :, None, None] & combo[None]).flatten(1, 2).any(1)  # (N, n_child)
        assert not (child & ~reachable).any()
        # exactly one combination of each active parent is contained in the child set
        contained = ((combo[None] & ~child[:, None, None, :]).sum(-1) == 0)  # (N, n_parent, C)
        assert contained.any(-1)[parent].all()
    assert (s.latents[0].sum(1) == 2).all()  # a class activates one combination: 2 distinct latents


def test_topdown_structure_fixed_by_seed_and_fit_check():
    a, b = TopDownHierarchy(TopDownConfig()), TopDownHierarchy(TopDownConfig())
    assert all(torch.equal(x, y) for x, y in zip(a.combos, b.combos))
    assert all((c.sum(-1) == 2).all() for c in a.combos)
    with pytest.raises(ConfigError, match="seq_len"):
        TopDownConfig(seq_len=7)  # up to 8 tokens
    with pytest.raises(ConfigError, match="num_children"):
        TopDownConfig(num_children=11)


# --------------------------------------------------------------------------- alignment score
def test_alignment_score_identity_random_and_loop():
    g = torch.Generator().manual_seed(2)
    z = (torch.rand(400, 5, generator=g) < 0.3).float()
    h = torch.rand(400, 7, generator=g)
    score, best = alignment_score(torch.cat([h, z[:, 2:3] * 3 + 1], 1), z[:, 2:3])
    assert score == pytest.approx(1.0)
    rand_score, _ = alignment_score(torch.rand(4000, 16, generator=g), (torch.rand(4000, 5, generator=g) < 0.3))
    assert rand_score < 3 * math.sqrt(2 * math.log(16) / 4000)
    # vectorised correlation equals a per-pair loop
    corr = latent_correlations(h, z)
    for j in range(5):
        for f in range(7):
            a, b = z[:, j].double(), h[:, f].double()
            r = ((a - a.mean()) * (b - b.mean())).sum() / ((a - a.mean()).norm() * (b - b.mean()).norm())
            assert corr[j, f].item() == pytest.approx(r.item(), abs=1e-10)
    assert alignment_score(h, z)[0] == pytest.approx(float(corr.max(1).values.mean()))
    # a constant latent is left out of the mean; a dead unit never wins
    z2 = torch.cat([z, torch.zeros(400, 1)], 1)
    s2, best2 = alignment_score(torch.cat([h, torch.zeros(400, 1)], 1), z2)
    assert math.isnan(best2[-1]) and s2 == pytest.approx(alignment_score(h, z)[0])


def test_pool_hidden_ignores_pad():
    h = torch.tensor([[[5.0], [1.0], [2.0]]])  # (1, T=3, F=1)
    assert pool_hidden(h, torch.tensor([[True, False, False]])).item() == 2.0


# --------------------------------------------------------------------------- model
def _model(**kw):
    torch.manual_seed(0)
    return PostLNTransformer(TransformerConfig(d_model=16, n_heads=2, d_ffn=24, n_layers=3, **kw), 11, 6, 4, pad_id=10)


def test_model_shapes():
    m = _model()
    x = torch.tensor([[10, 10, 3, 4, 5, 6], [10, 10, 10, 10, 10, 1]])
    out = m(x)
    assert out.logits.shape == (2, 4)
    assert len(out.ffn_hidden) == 3 and all(h.shape == (2, 6, 24) for h in out.ffn_hidden)
    assert all((h >= 0).all() for h in out.ffn_hidden)  # after ReLU
    assert all(a.shape == (2, 2, 6, 6) for a in out.attention)
    assert all((a[:, :, :, :2] == 0).all() for a in out.attention[:1])  # no mass on PAD keys (row 0)


def test_model_pad_masking():
    m = _model()
    x = torch.tensor([[10, 10, 3, 4, 5, 6]])
    pad = x == 10
    base = m(x, pad).logits
    other = x.clone()
    other[0, :2] = torch.tensor([7, 2])  # different tokens at padded positions, same mask
    torch.testing.assert_close(m(other, pad).logits, base)
    assert not torch.allclose(m(other).logits, base)  # unmasked, they would matter


def test_model_post_ln_placement():
    m = _model()
    out = m(torch.randint(0, 10, (3, 6)))
    for z in out.block_out:  # each block ends in LayerNorm (unit affine at init): mean 0, var 1 per position
        torch.testing.assert_close(z.mean(-1), torch.zeros(3, 6), atol=1e-5, rtol=0)
        torch.testing.assert_close(z.var(-1, correction=0), torch.ones(3, 6), atol=1e-3, rtol=0)
    blk = m.blocks[0]
    x = torch.randn(1, 6, 16)
    out, h, _ = blk.trace(x, torch.zeros(1, 1, 1, 6, dtype=torch.bool))
    x1 = blk.norm1(x + _attn(blk, x))  # LayerNorm AFTER the attention residual
    torch.testing.assert_close(h, torch.relu(blk.linear1(x1)))
    torch.testing.assert_close(out, blk.norm2(x1 + blk.linear2(h)))  # and after the FFN residual


def _attn(blk, x):
    """Multi-head attention output (projected, no mask), recomputed by hand."""
    n, t, d = x.shape
    q, k, v = blk.in_proj(x).view(n, t, 3, blk.heads, d // blk.heads).permute(2, 0, 3, 1, 4)
    a = (q @ k.transpose(-1, -2) / (d // blk.heads) ** 0.5).softmax(-1)
    return blk.out_proj((a @ v).transpose(1, 2).reshape(n, t, d))


def test_model_config_errors():
    with pytest.raises(ConfigError, match="divisible"):
        TransformerConfig(d_model=10, n_heads=3)


# --------------------------------------------------------------------------- experiments (tiny)
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["topdown", "tree"])
def test_hierarchy_experiment_runs_tiny(tmp_path, variant):
    from attnlab.experiments.runner import RunContext
    from attnlab.theory.joma.exp_hierarchy import HierarchyConfig, run_hierarchy

    cfg = HierarchyConfig(variant=variant, model=TransformerConfig(d_model=16, n_heads=2, d_ffn=32), steps=4,
                          batch_size=32, eval_size=128, n_evals=3, bayes_samples=500)
    res = run_hierarchy(cfg, RunContext(tmp_path, show_progress=False))
    assert (tmp_path / "hierarchy_scores.png").exists()
    assert len(res.metrics["score_table"]) == 3 * len(res.metrics["levels"])
    assert res.metrics["eval_steps"][0] == 0 and res.metrics["eval_steps"][-1] == 4
    assert len(res.claims) == len(res.metrics["levels"]) + 2


def test_cooccurrence_experiment_runs_tiny(tmp_path):
    from attnlab.experiments.runner import RunContext
    from attnlab.theory.joma.exp_hierarchy import CooccurrenceConfig, run_cooccurrence

    res = run_cooccurrence(CooccurrenceConfig(tree=LatentTreeConfig(num_classes=2, height=3), samples=20_000),
                           RunContext(tmp_path, show_progress=False))
    assert (tmp_path / "cooccurrence.png").exists()
    assert res.metrics["exact"]["pearson"] > 0.99


def test_hierarchy_config_errors():
    from attnlab.theory.joma.exp_hierarchy import HierarchyConfig

    with pytest.raises(ConfigError, match="seq_len"):
        HierarchyConfig(variant="tree", tree=LatentTreeConfig(num_classes=2, height=7))  # 64 tokens > 30
    with pytest.raises(ConfigError, match="variant"):
        HierarchyConfig(variant="bottomup")


def test_empty_sequence_stays_finite():
    m = _model()
    out = m(torch.full((2, 6), 10))  # no tokens at all (the probabilistic tree can emit none)
    assert torch.isfinite(out.logits).all()
    assert (pool_hidden(out.ffn_hidden[0], torch.ones(2, 6, dtype=torch.bool)) == 0).all()


def test_block_is_the_shared_post_ln_block():
    from attnlab.core.nn import PostLNBlock

    blk = _model().blocks[0]
    assert type(blk) is PostLNBlock
    x, mask = torch.randn(2, 6, 16), torch.zeros(2, 1, 1, 6, dtype=torch.bool)
    out, _, a = blk.trace(x, mask)
    out2, a2 = blk(x, mask)  # forward: the same block without the FFN activations
    torch.testing.assert_close(out2, out, rtol=0, atol=0)
    torch.testing.assert_close(a2, a, rtol=0, atol=0)
