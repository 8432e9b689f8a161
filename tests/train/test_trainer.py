"""The trainer: metrics lines, per-group learning rates, exact resume, bad input."""
import fractions
import json
import os

import pytest
import torch

from attnlab.core.errors import ConfigError, UsageError
from attnlab.core.metrics import sink_share
from attnlab.train.trainer import TrainConfig, Trainer, attention_stats, param_groups
from attnlab.train.tutorial import TutorialConfig, TutorialTransformer

V = 40


def _ids(n=3000, seed=0):
    # a learnable stream: mostly token t+1 after t, some noise
    g = torch.Generator().manual_seed(seed)
    ids = torch.arange(n) % V
    noise = torch.rand(n, generator=g) < 0.2
    return torch.where(noise, torch.randint(0, V, (n,), generator=g), ids)


def _trainer(tmp, **kw):
    torch.manual_seed(0)
    model = TutorialTransformer(TutorialConfig(vocab_size=V, d_model=16, d_ffn=16, n_layers=2, dropout=0.1))
    cfg = TrainConfig(**{"batch_size": 4, "bptt": 8, "steps": 24, "track_every": 4, "eval_every": 8,
                         "eval_batches": 3, "checkpoint_every": 8, "snapshot_steps": (0, 8), "lr": 1.0, **kw})
    return Trainer(model, _ids(), _ids(600, 1), cfg, tmp)


@pytest.mark.parametrize("batching", ["bptt", "random"])
@pytest.mark.slow
def test_killed_and_resumed_run_writes_identical_metrics(tmp_path, batching):
    full = _trainer(tmp_path / "full", batching=batching).fit(show_progress=False)

    def kill(step):
        if step == 13:  # after the checkpoint at 8, before the one at 16
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path / "cut", batching=batching).fit(show_progress=False, on_step=kill)
    resumed = _trainer(tmp_path / "cut", batching=batching).fit(resume=True, show_progress=False)
    assert resumed == full
    assert [m["step"] for m in full] == [0, 4, 8, 12, 16, 20, 24]
    assert "valid_loss" in full[2] and "valid_loss" not in full[1]
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_metrics_content_and_learning(tmp_path):
    tr = _trainer(tmp_path, steps=60, lr=0.01, optimizer="adam", track_every=20, eval_every=20)
    lines = tr.fit(show_progress=False)
    assert lines[-1]["valid_loss"] < lines[0]["valid_loss"]  # it learns
    first = lines[0]
    assert len(first["entropy"]) == 2 and len(first["entropy"][0]) == 1  # layers x heads
    assert all(0 <= s <= 1 for s in first["first_token_share"])
    assert set(tr.snapshots) == {0, 8} and tr.snapshots[8][0].shape == (1, 8, 8)
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1]) == lines[-1]


def test_attention_stats_uniform_and_one_hot():
    T = 5
    causal_uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    stats = attention_stats([causal_uniform.expand(2, 1, T, T)])
    want = torch.log(torch.arange(1, T + 1, dtype=torch.float)).mean()
    assert abs(stats["entropy"][0][0] - want.item()) < 1e-6
    first = torch.zeros(1, 1, T, T)
    first[..., 0] = 1
    assert attention_stats([first]) == {"entropy": [[0.0]], "first_token_share": [1.0],
                                        "sink_rate": [1.0, 0.0, 0.0, 0.0, 0.0],  # every head sinks on token 0 only
                                        "sink_importance_max": 1.0}
    assert torch.allclose(sink_share(causal_uniform), 1 / torch.arange(1, T + 1))  # (T, T) -> (T,): row i gives 1/i


def test_group_learning_rates():
    model = TutorialTransformer(TutorialConfig(vocab_size=V, d_model=8, n_layers=2))
    groups = param_groups(model, TrainConfig(lr=5.0, group_lrs=("layers.0.linear*=10",)))
    by_lr = {g["lr"]: g["params"] for g in groups}
    assert set(by_lr) == {5.0, 10.0}
    l0 = model.layers[0]
    assert {id(p) for p in by_lr[10.0]} == {id(p) for p in (*l0.linear1.parameters(), *l0.linear2.parameters())}
    with pytest.raises(ConfigError, match="match no parameter"):
        param_groups(model, TrainConfig(group_lrs=("nothing*=1",)))
    with pytest.raises(ConfigError, match="PARAM_GLOB=LR"):
        TrainConfig(group_lrs=("layers.0=abc",))


def test_bad_input(tmp_path):
    with pytest.raises(UsageError, match="bptt=500 is longer"):
        _trainer(tmp_path, bptt=500)
    tr = _trainer(tmp_path / "run")
    tr.fit(show_progress=False)
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    with pytest.raises(UsageError, match="different config"):
        _trainer(tmp_path / "run", lr=2.0).fit(resume=True, show_progress=False)
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before  # untouched
    with pytest.raises(UsageError, match="no checkpoint"):
        _trainer(tmp_path / "new").fit(resume=True, show_progress=False)
    with pytest.raises(ConfigError, match="optimizer"):
        TrainConfig(optimizer="lion")


def _killed_run(tmp, step=13):
    """A run killed after the checkpoint at step 8, as the test above makes one."""
    def kill(s):
        if s == step:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp).fit(show_progress=False, on_step=kill)
    return tmp


@pytest.mark.parametrize("damage", ["empty", "truncated", "tail_cut", "garbage", "not_a_checkpoint", "code"])
def test_damaged_checkpoint_is_one_usage_error_and_touches_nothing(tmp_path, damage):
    run = _killed_run(tmp_path / "run")
    ckpt = run / "checkpoint.pt"
    data = ckpt.read_bytes()
    if damage == "code":  # weights_only=True refuses to unpickle arbitrary objects
        torch.save({"model": fractions.Fraction(1, 3)}, ckpt)
    elif damage == "not_a_checkpoint":
        torch.save({"step": 3}, ckpt)
    else:
        ckpt.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "tail_cut": data[:-5],
                          "garbage": b"not a checkpoint " * 8}[damage])
    before = (run / "metrics.jsonl").read_text()
    fragment = "is not an attnlab train checkpoint" if damage == "not_a_checkpoint" else "is truncated, damaged"
    with pytest.raises(UsageError, match=fragment):
        _trainer(run).fit(resume=True, show_progress=False)
    assert (run / "metrics.jsonl").read_text() == before


@pytest.mark.slow
def test_torn_last_metrics_line_is_dropped_and_the_file_replaced(tmp_path, capsys):
    full = _trainer(tmp_path / "full").fit(show_progress=False)
    run = _killed_run(tmp_path / "cut")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 16, "train_loss": 2.3, "entro')  # a kill during an append
    inode = os.stat(run / "metrics.jsonl").st_ino
    assert _trainer(run).fit(resume=True, show_progress=False) == full
    assert "dropped a torn last line" in capsys.readouterr().err
    assert os.stat(run / "metrics.jsonl").st_ino != inode  # rewritten aside and renamed, not in place


def test_damaged_earlier_metrics_line_is_a_usage_error(tmp_path):
    run = _killed_run(tmp_path / "run")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    damaged = "\n".join([lines[0], "garbage", *lines[1:]]) + "\n"
    (run / "metrics.jsonl").write_text(damaged)
    with pytest.raises(UsageError, match="line 2 is not a metrics line"):
        _trainer(run).fit(resume=True, show_progress=False)
    assert (run / "metrics.jsonl").read_text() == damaged
