"""`attnlab view` end to end on a tiny llama: the page carries exactly what Python computes (attention at 8
bits, the heads' statistics, the policies' kept sets), nothing from elsewhere; bad input is one line, exit 2,
nothing written."""
import numpy as np
import pytest

from attnlab.cli import main
from attnlab.core.metrics import attention_entropy
from attnlab.kv.policies import make_policy
from attnlab.view.pack import unblob, unpack_head
from attnlab.view.replay import replay
from tiny_models import save_hf
from view.conftest import BUDGET, CHUNK, POLICIES, TEXT, TOKENS, page_data


def test_the_page_carries_the_quantised_attention_of_every_head(view):
    d, (L, H, T, _) = view.data, view.attention.shape
    assert (d["T"], d["layers"], d["heads"], d["kv_heads"]) == (TOKENS, L, H, view.model.config.num_key_value_heads)
    assert d["ids"] == view.ids.tolist() and d["tokens"] == [view.tok.decode([i]) for i in d["ids"]]
    mask, values = unblob(d["attention"]["mask"]), unblob(d["attention"]["values"])
    for layer in range(L):
        for h in range(H):
            stored = unpack_head(mask, values, d["attention"]["counts"], layer * H + h, T)
            assert np.array_equal(stored, view.q[layer, h].numpy()), (layer, h)
    assert np.allclose(d["attention"]["scale"], view.scale.numpy())


def test_the_heads_statistics_and_heavy_hitters_are_computed_from_the_full_precision_maps(view):
    d, a = view.data, view.attention.double()
    rows = a[:, :, 1:]  # row 0 sees only itself
    assert np.allclose(d["sink"], rows[..., 0].mean(-1).numpy())
    assert np.allclose(d["entropy"], attention_entropy(rows).mean(-1).numpy())
    n_kv = d["kv_heads"]
    acc = np.frombuffer(unblob(d["accumulated"]), "<f4").reshape(d["layers"], n_kv, TOKENS)
    # H2O's score: the attention each key receives, summed over the queries of a KV head's group of heads
    expected = a.reshape(d["layers"], n_kv, -1, TOKENS, TOKENS).sum((2, 3))
    assert np.allclose(acc, expected.numpy(), rtol=1e-5)
    first = expected[..., :d["n_sink"]].sum(-1) / expected.sum(-1)
    assert np.allclose(d["first_share"], first.numpy())


def test_the_page_carries_each_policys_kept_sets_as_its_own_replay_computes_them(view):
    d = view.data
    assert [r["policy"] for r in d["replays"]] == list(POLICIES) and d["chunk"] == CHUNK
    for r in d["replays"]:
        (alone,) = replay(view.model, view.ids, [make_policy(r["policy"], BUDGET, n_sink=4)], CHUNK)
        assert r["ends"] == alone.ends == list(range(CHUNK, TOKENS + 1, CHUNK))
        bits = np.frombuffer(unblob(r["kept"]), np.uint8).reshape(len(r["ends"]), d["layers"], d["kv_heads"], -1)
        assert np.array_equal(np.unpackbits(bits, axis=-1)[..., :TOKENS].astype(bool), alone.kept.numpy())


def test_the_page_is_self_contained(view):
    assert "src=" not in view.html and "href=" not in view.html and "@import" not in view.html
    assert "http://" not in view.html and "https://" not in view.html


@pytest.mark.parametrize("change, message", [
    (("--text", "   "), "--text is empty"),
    (("--tokens", "0"), "--tokens 0: give 1 to"),
    (("--tokens", "65"), "--tokens 65: give 1 to 64 (the model's context)"),
    (("--tokens", "4096"), "--tokens 4096: give 1 to 2048"),
    (("--policies", "window,h2p"), "h2p"),
    (("--budgets", "big"), "--budgets 'big'"),
    (("--chunk", "0"), "--chunk 0"),
])
def test_bad_input_is_one_line_exit_2_and_the_old_page_is_kept(view, tmp_path, capsys, change, message):
    out = tmp_path / "view.html"
    previous = '<script type="application/json" id="attnlab-data">{"T": 1}</script>'  # an earlier page
    out.write_text(previous)
    argv = list(view.argv)
    argv[argv.index("--out") + 1] = str(out)
    argv[argv.index(change[0]) + 1] = change[1]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert out.read_text() == previous and sorted(p.name for p in tmp_path.iterdir()) == ["view.html"]


def test_an_output_in_a_missing_folder_is_refused_before_the_model_loads(view, tmp_path, capsys):
    argv = list(view.argv)
    argv[argv.index("--out") + 1] = str(tmp_path / "no" / "view.html")
    argv[argv.index("--model") + 1] = str(tmp_path / "no-model")  # would fail to load: the folder check is first
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and len(err.splitlines()) == 1 and not (tmp_path / "no").exists()


def test_a_text_file_is_read_with_its_line_breaks_and_capped_at_tokens(view, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("first line\nsecond line\n" * 3)
    out = tmp_path / "f.html"
    assert main(["view", "--model", str(view.folder), "--text-file", str(text), "--tokens", "20", "--policies", "",
                 "--out", str(out)]) == 0
    d = page_data(out.read_text(encoding="utf-8"))
    assert d["T"] == 20 and "".join(d["tokens"]) == "first line\nsecond line\n"[:20] and d["replays"] == []
    assert d["text"] == str(text) and d["model"] == str(view.folder)


def test_an_attnlab_train_run_folder_is_a_model(view, tmp_path):
    run = tmp_path / "run"
    save_hf(run / "model")  # what `attnlab train --model llama` leaves: the run folder with its model/
    out = tmp_path / "run.html"
    assert main(["view", "--model", str(run), "--text", "the cat sat", "--policies", "sinks", "--budgets", "6",
                 "--out", str(out)]) == 0
    d = page_data(out.read_text(encoding="utf-8"))
    assert d["model"] == str(run) and d["T"] == len("the cat sat")  # a byte tokenizer: a token per character
    assert [r["label"] for r in d["replays"]] == ["sinks 4+2"]


def test_methods_draw_the_page_under_them_and_a_kv_method_is_one_more_replay(view, tmp_path):
    """`--method int8` draws every map and replay on the int8 model, as build_view under QuantizedWeights by hand
    does; `--method tova:budget=12,heads=each` is one more replay, with its option."""
    from attnlab.quant.transform import QuantizedWeights
    from attnlab.view.build import build_view

    out = tmp_path / "m.html"
    argv = ["view", "--model", str(view.folder), "--text", TEXT, "--tokens", str(TOKENS), "--policies", "sinks",
            "--budgets", str(BUDGET), "--chunk", str(CHUNK), "--method", "int8", "--method",
            f"tova:budget={BUDGET},heads=each", "--out", str(out)]
    assert main(argv) == 0
    d = page_data(out.read_text(encoding="utf-8"))
    assert [r["policy"] for r in d["replays"]] == ["sinks", "tova"]
    with QuantizedWeights(view.model, "int8"):
        hand = page_data(build_view(view.model, view.tok, view.ids, [make_policy("sinks", BUDGET, n_sink=4),
                                    make_policy("tova", BUDGET, heads="each")], CHUNK,
                                    {"model": str(view.folder), "text": "the given text",
                                     "methods": ["int8", f"tova:budget={BUDGET},heads=each"]}))
    assert d == hand
    assert d["methods"] == ["int8", f"tova:budget={BUDGET},heads=each"]
    assert d["attention"] != view.data["attention"]  # the maps are the int8 model's, not the float one's
