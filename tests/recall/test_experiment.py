"""``attnlab reproduce streameval`` on a tiny model folder (byte tokenizer; no network)."""
import json

import pytest

from attnlab.cli import main
from attnlab.experiments.claims import check
from attnlab.recall.experiments import StreamEvalConfig, _claims, _findings, _gate, _passkey_claims, _premise
from tiny_models import save_hf

SETS = ["--set", "lines=12", "--set", "query_every=3", "--set", "distances=2,7", "--set", "budgets=140",
        "--set", "answer_tokens=3", "--set", "passkey_length=420", "--set", "passkey_budget=100",
        "--set", "passkey_depths=0,1"]


def _run(tmp_path, out, *extra):
    model = tmp_path / "m" if (tmp_path / "m").exists() else save_hf(tmp_path / "m")
    return main(["reproduce", "streameval", "--out", str(tmp_path / out), "--set", f"model={model}", *SETS, *extra])


@pytest.mark.slow
def test_workers_give_the_same_answers_as_one_process(tmp_path):
    assert _run(tmp_path, "one", "--set", "workers=1") == 0
    assert _run(tmp_path, "two", "--set", "workers=2") == 0
    one, two = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert _same_answers(one, two)
    names = set(one["runs"])
    assert {"full", "sinks 4+136", "h2o 140", "sinks+h2o 140", "passkey: full", "passkey: sinks 4+96"} <= names
    assert all((tmp_path / "one" / f).exists() for f in ("streameval_accuracy.png", "streameval_kept.png"))
    premise, *rest = one["claims"]  # a random model answers nothing: the stream's claims cannot be decided
    assert premise["claim"].startswith("the full cache answers") and premise["status"] == "fails"
    assert {c["status"] for c in rest if not c["claim"].startswith("passkey")} <= {"unresolved", "finding"}


def _same_answers(one, two):
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    return all(strip(one["runs"][k]) == strip(two["runs"][k]) for k in one["runs"])


@pytest.mark.parametrize("sets, message", [
    (["--set", "budgets=20"], "smaller than 4 sink"),
    (["--set", "distances=40"], "longer than the stream"),
    (["--set", "policies=lru"], "policies"),
    (["--set", "policies=sinks,full"], "policies ['full']: use some of window, sinks, h2o, sinks+h2o, knorm"),
    (["--set", "passkey_budget=12"], "passkey_budget"),
    (["--set", "positions=absolute"], "positions"),
    (["--set", "answer_tokens=0"], "answer_tokens"),
    (["--set", "chat=true"], "has no chat template: use an instruction-tuned model or drop chat"),
    (["--set", "lines=0", "--set", "passkey_length=0"], "nothing to stream"),
])
def test_bad_configs_are_one_line_and_exit_2(tmp_path, capsys, sets, message):
    save_hf(tmp_path / "m")
    capsys.readouterr()  # saving the model may print its own progress
    assert _run(tmp_path, "bad", *sets) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "bad").exists()


def _answers(correct, distances, kept):
    return {"answers": [{"correct": c, "nominal": 3, "token_distance": d, "kept": k}
                        for c, d, k in zip(correct, distances, kept)]}


def test_what_an_evicted_value_cannot_answer_is_a_finding_and_scored_policies_report_what_they_kept():
    """sinks+window's accuracy once the value is evicted is reported, never checked (it cannot fail); the
    StreamH2O claim counts the queries older than sinks+h2o's own recent window; every policy that keeps slots
    by a per-head score (h2o, sinks+h2o, knorm -- not sinks, not window) gets its kept-share findings."""
    cfg = StreamEvalConfig(distances=(3,), budgets=(100,), policies=("sinks", "sinks+h2o", "knorm", "window"))
    dist = [10, 40, 60, 90]  # tokens back; sinks+h2o's recent window is 50
    runs = {"full": _answers([True] * 4, dist, [1.0] * 4),
            "sinks 4+96": _answers([True, True, False, False], dist, [1.0, 1.0, 0.0, 0.0]),
            "sinks+h2o 100": _answers([True, False, True, True], dist, [1.0, 1.0, 0.5, 0.25]),
            "knorm 100": _answers([False, False, True, False], dist, [0.5, 0.5, 1.0, 0.0]),
            "window 100": _answers([True, True, False, False], dist, [1.0, 1.0, 0.0, 0.0])}
    claims = _claims(cfg, runs)
    assert [c.status for c in claims] == ["holds", "holds", "finding", "holds"]
    assert claims[2].claim.startswith("sinks 4+96: once the value is evicted (2 queries)") and claims[2].measured == 0
    assert "of the 2 queries older than its recent window (50 tokens)" in claims[3].claim and claims[3].measured == 2
    found = {c.claim.split(":")[0]: c.measured for c in _findings(cfg, runs) if "(layer, KV head)" in c.claim}
    assert list(found) == ["sinks+h2o 100", "knorm 100"]
    assert cfg.recent_windows() == {"sinks+h2o 100": 50, "knorm 100": 0}


def _passkeys(correct, kept):
    return {"passkey": [{"correct": c, "kept": k} for c, k in zip(correct, kept)]}


def test_the_passkey_checks_the_seeds_statements_about_h2o_against_sinks_window():
    """h2o ("StreamingLLM is a subset of H2O") and sinks+h2o (StreamH2O) must find at least as many passkeys as
    sinks+window at the passkey budget; a failure says where each policy still held the passkey."""
    cfg = StreamEvalConfig(lines=0, passkey_budget=100, passkey_depths=(0.0, 0.5, 1.0))
    runs = {"passkey: sinks 4+96": _passkeys([False, True, True], [0.0, 1.0, 1.0]),
            "passkey: h2o 100": _passkeys([False, False, True], [0.0, 0.0, 1.0]),
            "passkey: sinks+h2o 100": _passkeys([True, True, True], [1.0, 1.0, 1.0])}
    claims = _passkey_claims(cfg, runs)
    assert [c.status for c in claims] == ["finding"] * 3 + ["fails", "holds"]
    assert [c.measured for c in claims[3:]] == [-1, 1]
    assert "0.00, 0.00, 1.00 (sinks+window: 0.00, 1.00, 1.00)" in claims[3].note and claims[4].note is None


def test_the_quick_stream_leaves_its_claims_unresolved_and_its_findings_alone():
    """checked=False (the quick mode: a handful of queries) turns no claim into a finding: each checked claim is
    unresolved, with how many queries there were; the findings stay findings."""
    from attnlab.recall.experiments import _undecided

    cfg = StreamEvalConfig(distances=(3,), budgets=(100,), policies=("sinks", "sinks+h2o"), checked=False)
    dist = [10, 40, 60, 90]
    runs = {"full": _answers([True] * 4, dist, [1.0] * 4),
            "sinks 4+96": _answers([True, True, False, False], dist, [1.0, 1.0, 0.0, 0.0]),
            "sinks+h2o 100": _answers([True, False, True, True], dist, [1.0, 1.0, 0.5, 0.25])}
    claims = _claims(cfg, runs)
    quick = _undecided(cfg, runs, claims)
    assert [c.status for c in quick] == ["unresolved" if c.test else "finding" for c in claims]
    assert all("4 queries" in c.note and c.holds is None for c in quick if c.status == "unresolved")
    assert [c.measured for c in quick] == [c.measured for c in claims]


def test_the_premise_is_decided_by_its_exact_interval_and_gates_the_streams_claims():
    """Claim 0: the full cache answers >= full_answers of the queries, by Clopper-Pearson. Three wrong answers
    decide that it does not (the interval's top is 0.71 < 0.75); three right ones decide nothing; where the
    premise does not hold, every stream claim is unresolved and the passkey's keep their verdicts."""
    cfg = StreamEvalConfig(distances=(3,), budgets=(100,), policies=("sinks",))
    none, all3 = (_premise(cfg, _answers([c] * 3, [10] * 3, [1.0] * 3)["answers"]) for c in (False, True))
    assert none.status == "fails" and abs(none.interval[1] - (1 - 0.025 ** (1 / 3))) < 1e-9
    assert all3.status == "unresolved" and all3.n == 3
    many = _premise(cfg, _answers([True] * 20, [10] * 20, [1.0] * 20)["answers"])
    assert many.status == "holds"
    claims = [check("a stream claim", 1.0, 0.75, 0, "at_least"), check("passkey: a passkey claim", 1, 0, 0, "at_least")]
    assert [c.status for c in _gate(none, claims)] == ["unresolved", "holds"]
    assert _gate(many, claims) == claims
