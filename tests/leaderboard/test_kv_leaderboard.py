"""The leaderboard: its claims from made-up answers (each decided by its paired interval, none without a
premise), and the experiment end to end on a tiny model folder and a made-up haystack."""
import json
import random

import pytest

from attnlab.cli import main
from attnlab.leaderboard.board import claims, table
from tiny_models import byte_tokenizer, tiny


def _rows(scores: dict[tuple, list[float]]) -> list[dict]:
    return [{"task": "niah_single", "length": 512, "item": i, "regime": g, "policy": p, "ratio": r, "score": s}
            for (g, p, r), xs in scores.items() for i, s in enumerate(xs)]


def test_the_claims_are_decided_by_their_intervals_once_the_premise_holds():
    n = 30
    rows = _rows({("full", "full", 0.0): [1.0] * n, ("prefill", "snapkv", 0.5): [1.0] * n,
                  ("prefill", "h2o", 0.5): [1.0] * (n // 2) + [0.0] * (n // 2),
                  ("prefill", "sinks", 0.875): [0.0] * n, ("decode", "snapkv", 0.5): [0.0] * n})
    by = {c.claim.split(":")[0]: c for c in claims(rows, 0.5)}
    assert by["premise"].status == "holds" and by["premise"].n == n
    assert [c.status for k, c in by.items() if k.startswith(("SnapKV", "StreamingLLM", "a query"))] == ["holds"] * 3
    assert table(rows)["prefill"]["h2o"]["0.5"]["average"] == 0.5


def test_two_sides_at_the_floor_decide_nothing():
    rows = _rows({("full", "full", 0.0): [1.0] * 10, ("prefill", "snapkv", 0.5): [0.0] * 10,
                  ("decode", "snapkv", 0.5): [0.0] * 10})
    (decode,) = [c for c in claims(rows, 0.5) if c.claim.startswith("a query-aware")]
    assert decode.status == "unresolved" and "floor or ceiling" in decode.note


def test_without_the_premise_no_method_claim_is_decided():
    rows = _rows({("full", "full", 0.0): [0.0] * 10, ("prefill", "snapkv", 0.5): [1.0] * 10,
                  ("prefill", "h2o", 0.5): [0.0] * 10})
    found = claims(rows, 0.5)
    assert found[0].status == "fails"  # the premise, decided
    stated = [c for c in found if c.status != "finding"][1:]
    assert [c.status for c in stated] == ["unresolved"] * 3 and all("premise" in c.note for c in stated)


@pytest.mark.slow
def test_the_experiment_runs_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "m"
    tiny("llama", 0, vocab_size=300, max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=256,
         eos_token_id=256).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    rng = random.Random(0)
    words = [f"{a}{b}word" for a in "abcdefgh" for b in "klmnopqr"]
    (tmp_path / "hay.txt").write_text("\n".join(" ".join(rng.choices(words, k=8)) + "." for _ in range(300)))
    sets = [f"model={folder}", f"haystack={tmp_path / 'hay.txt'}", "tasks=niah_single,vt", "lengths=700", "n=2",
            "ratios=0.5,0.75", "policies=sinks,snapkv", "max_new=4", "chunk=16"]
    out = tmp_path / "run"
    assert main(["reproduce", "kv-leaderboard", "--out", str(out)] + [a for s in sets for a in ("--set", s)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert len(m["answers"]) == 2 * 2 * (1 + 2 * 2 * 2)  # tasks x items x (full + regimes x policies x ratios)
    assert set(m["table"]) == {"full", "prefill", "decode"} and set(m["table"]["decode"]["snapkv"]) == {"0.5", "0.75"}
    kept = {(a["regime"], a["ratio"]): a["kept_context"] / a["context_tokens"] for a in m["answers"]}
    assert kept[("full", 0.0)] == 1.0 and abs(kept[("prefill", 0.75)] - 0.25) < 0.01
    assert (out / "leaderboard.png").stat().st_size > 0 and "## Claims" in (out / "report.md").read_text()
    prefill, decode = (m["costs"][g]["snapkv"]["0.75"] for g in ("prefill", "decode"))
    assert 0 < prefill["kv_bytes"] < m["costs"]["full"]["full"]["0"]["kv_bytes"]  # a quarter of the context kept
    assert decode["tokens_per_s"] > 0 and decode["kv_bytes"] == prefill["kv_bytes"]  # the same slots held then
