"""The JoMA layer and Theorem 1: exact per-step identities of gradient descent, the layer's
algebra, embeddings and shape errors."""
import numpy as np
import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.joma.invariants import cooccurrence_table, exp_step_drift, pearson, relative_error, zhat
from attnlab.theory.joma.model import JomaLayer, attention, check_embedding, make_embedding, train

MC, C, D = 6, 4, 9  # contextual tokens, classes, embedding dim


def _data(seed=0, S=3):
    g = torch.Generator().manual_seed(seed)
    X = torch.stack([cooccurrence_table(3, 3, C, "random", g) for _ in range(S)])  # (S, MC, C)
    return X.transpose(1, 2).contiguous(), torch.arange(C), g


def _run(form, act, head, eta_w, eta_z, tau=0.7, steps=15, S=3, z_start=0.3):
    x, y, g = _data(S=S)
    U = make_embedding("random", D, MC, seed=3)
    layer = JomaLayer(U, form, tau, act, "ce", head)
    W0 = torch.randn(S, D, C, generator=g, dtype=torch.float64) * 0.3
    z0 = z_start + 0.1 * torch.randn(S, MC, generator=g, dtype=torch.float64)
    head0 = torch.randn(S, C, C, generator=g, dtype=torch.float64) if head == "linear" else None
    return train(layer, x, y, W0, z0, eta_w, eta_z, steps, head0)


@pytest.mark.parametrize("act,head", [("linear", "none"), ("relu", "linear")])
@pytest.mark.parametrize("eta_w,eta_z", [(0.2, 0.2), (0.3, 0.05)])
def test_exp_attention_invariant_drift_is_exactly_eulers(act, head, eta_w, eta_z):
    """z - r Σ_k V²/(2τ) changes per step by exactly -r Σ_k ΔV²/(2τ), r = η_z/η_W: the flow
    keeps it constant, so what gradient descent adds is Euler's O(η²) term and nothing else."""
    tau, r = 0.7, eta_z / eta_w
    h = _run("exp", act, head, eta_w, eta_z, tau)
    inv = h.z - r * h.V.pow(2).sum(-1) / (2 * tau)  # (T, S, MC)
    drift = exp_step_drift(h.V[:-1], h.V[1:], r, tau)
    torch.testing.assert_close(inv.diff(dim=0), drift, rtol=1e-9, atol=1e-12)
    assert drift.abs().max() > 0  # the test would notice a missing drift


@pytest.mark.parametrize("act,head", [("linear", "none"), ("relu", "linear")])
def test_linear_attention_invariant_drift_is_exactly_eulers(act, head):
    """z² - r Σ_k V² changes per step by exactly Δz² - r Σ_k ΔV² (the cross terms cancel)."""
    eta_w, eta_z = 0.25, 0.1
    r = eta_z / eta_w
    h = _run("linear", act, head, eta_w, eta_z, z_start=1.0)
    inv = h.z.pow(2) - r * h.V.pow(2).sum(-1)
    expected = h.z.diff(dim=0).pow(2) - r * h.V.diff(dim=0).pow(2).sum(-1)
    torch.testing.assert_close(inv.diff(dim=0), expected, rtol=1e-9, atol=1e-12)


def test_invariant_error_is_first_order_in_the_step():
    """Same time horizon, half the step: the exp invariant's error halves (Euler, order 1)."""
    errs = []
    for eta in (0.2, 0.1):
        h = _run("exp", "linear", "none", eta, eta, steps=round(4 / eta))
        errs.append(relative_error(h.z, zhat("exp", h.V, h.z[0], 1.0, 0.7)).median())
    assert errs[1] < errs[0] < 0.05
    assert 1.7 < errs[0] / errs[1] < 2.3


def test_softmax_prediction_uses_bbar_and_the_norm_term():
    """ẑ for softmax subtracts b̄ times the growth of the norm; at t = 0 it equals z(0)."""
    V = torch.randn(5, 2, MC, C, dtype=torch.float64)
    z0 = torch.randn(2, MC, dtype=torch.float64)
    bbar = torch.rand(MC, dtype=torch.float64)
    zh = zhat("softmax", V, z0, 1.0, 0.5, bbar)
    q = V.pow(2).sum(-1)
    s = V.pow(2).sum((-2, -1))
    torch.testing.assert_close(zh, z0 + ((q - q[0]) - bbar * (s - s[0])[..., None]) / 1.0)
    torch.testing.assert_close(zh[0], z0)
    with pytest.raises(ValueError, match="bbar"):
        zhat("softmax", V, z0)


def test_attention_forms():
    z = torch.randn(2, MC, dtype=torch.float64)
    x = torch.rand(4, MC, dtype=torch.float64)
    b = attention(z, x, "softmax", 0.5)
    w = x * (z[:, None] / 0.5).exp()
    torch.testing.assert_close(b, w / w.sum(-1, keepdim=True))
    torch.testing.assert_close(attention(z, x, "exp", 0.5), w)
    torch.testing.assert_close(attention(z, x, "linear"), x * z[:, None])
    # softmax is stable for large logits and ignores absent tokens (x_l = 0)
    x0 = x.clone()
    x0[:, 0] = 0
    b = attention(z + 1000, x0, "softmax")
    assert torch.isfinite(b).all() and (b[..., 0] == 0).all()


def test_hidden_is_phi_of_w_dot_f_with_residual_query():
    U = make_embedding("random", D, MC, seed=1)
    layer = JomaLayer(U, "softmax", 1.0, "relu")
    W = torch.randn(2, D, C, dtype=torch.float64)
    z = torch.randn(2, MC, dtype=torch.float64)
    x = torch.rand(3, MC, dtype=torch.float64)
    h = layer.hidden(W, z, x)
    for s in range(2):
        for n in range(3):
            b = torch.softmax(z[s], 0) * x[n] / (torch.softmax(z[s], 0) * x[n]).sum()
            f = U[:, :MC] @ b + U[:, MC]
            torch.testing.assert_close(h[s, n], (W[s].T @ f).relu())
    # U_Cᵀ f = b exactly: what makes V = U_Cᵀ W the right coordinates
    b = attention(z, x, "softmax")
    f = b @ U[:, :MC].T + U[:, MC]
    torch.testing.assert_close(f @ U[:, :MC], b)


def test_g_objective_backpropagates_a_constant_gradient():
    U = make_embedding("identity", D, MC)
    layer = JomaLayer(U, "exp", 1.0, "linear", "g")
    x, y, g = _data(S=1)
    W = torch.randn(1, D, C, generator=g, dtype=torch.float64)
    z = torch.randn(1, MC, generator=g, dtype=torch.float64)
    h = layer.hidden(W, z, x).detach().requires_grad_(True)
    # recompute the loss from h alone to read ∂L/∂h
    G = torch.eye(C, dtype=torch.float64) - 1.0 / C
    loss = -(G[y] * h).sum(-1).mean(-1).sum()
    (grad,) = torch.autograd.grad(loss, h)
    torch.testing.assert_close(grad[0], -G[y] / C)
    torch.testing.assert_close(layer.loss(W, z, x, y), loss.detach())


def test_cooccurrence_table_columns_and_bumps():
    g = torch.Generator().manual_seed(0)
    X = cooccurrence_table(10, 10, 20, "gaussian", g)
    torch.testing.assert_close(X.sum(0), torch.ones(20, dtype=torch.float64))
    # each class's distinct-token bump peaks at l ≈ 10k/K
    peaks = X[:10].argmax(0)
    assert (peaks - torch.arange(20) // 2).abs().max() <= 1
    with pytest.raises(ConfigError, match="random or gaussian"):
        cooccurrence_table(2, 2, 2, "uniform", g)


def test_pearson_matches_numpy():
    a, b = np.random.default_rng(0).normal(size=(2, 3, 7))
    got = pearson(torch.tensor(a), torch.tensor(b))
    want = [np.corrcoef(a[i], b[i])[0, 1] for i in range(3)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


# ----------------------------------------------------------------------------- bad input
def test_embeddings_are_checked(tmp_path):
    assert torch.equal(make_embedding("identity", 5, 3), torch.eye(5, 4, dtype=torch.float64))
    U = make_embedding("random", 7, 3, seed=2)
    torch.testing.assert_close(U.T @ U, torch.eye(4, dtype=torch.float64))
    with pytest.raises(ConfigError, match="not orthonormal"):
        check_embedding(2 * torch.eye(5, 4, dtype=torch.float64), 5, 3)
    with pytest.raises(ConfigError, match="shape"):
        check_embedding(torch.eye(5, 3, dtype=torch.float64), 5, 3)
    with pytest.raises(ConfigError, match="d >= 4"):
        make_embedding("identity", 3, 3)
    path = tmp_path / "U.npy"
    np.save(path, np.eye(5, 4))
    assert make_embedding(str(path), 5, 3).shape == (5, 4)
    np.save(path, np.ones((5, 4)))
    with pytest.raises(ConfigError, match="not orthonormal"):
        make_embedding(str(path), 5, 3)
    (tmp_path / "junk.npy").write_text("not a matrix")
    with pytest.raises(ConfigError, match="cannot read"):
        make_embedding(str(tmp_path / "junk.npy"), 5, 3)
    with pytest.raises(ConfigError, match="no such file"):
        make_embedding(str(tmp_path / "missing.npy"), 5, 3)


def test_shape_and_option_errors():
    U = make_embedding("identity", D, MC)
    x, y, _ = _data(S=1)
    W0 = torch.zeros(1, D, C + 1, dtype=torch.float64)
    with pytest.raises(ConfigError, match=f"set K={C} or use head=linear"):
        train(JomaLayer(U, "exp"), x, y, W0, torch.zeros(1, MC, dtype=torch.float64), 0.1, 0.1, 1)
    with pytest.raises(ConfigError, match="token counts"):
        train(JomaLayer(U, "exp"), x[..., :-1], y, W0[..., :C], torch.zeros(1, MC), 0.1, 0.1, 1)
    with pytest.raises(ConfigError, match="attention='cosine'"):
        JomaLayer(U, "cosine")
    with pytest.raises(ConfigError, match="tau"):
        JomaLayer(U, "softmax", tau=0.0)
    with pytest.raises(ConfigError, match="head=none"):
        JomaLayer(U, "exp", objective="g", head="linear")
