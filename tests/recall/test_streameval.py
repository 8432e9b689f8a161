"""StreamEval: the generated stream, the scorer, and answering in place through the cache (tiny llama, byte
tokenizer; no network)."""
import pytest
import torch

from attnlab.core.errors import ConfigError, UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.recall.decode import Pieces, check_budget, run_streameval, stream_tokens
from attnlab.recall.streameval import ANSWER, HEADER, LINE, QUESTION, StreamSpec, first_number, is_correct, make_stream
from tiny_models import tiny_llama

SPEC = StreamSpec(lines=12, query_every=3, distances=(1, 4, 2), seed=3)


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def pieces(byte_tok):
    return Pieces(byte_tok)


def test_the_stream_is_deterministic_for_a_seed_and_differs_across_seeds():
    assert make_stream(SPEC) == make_stream(SPEC)
    other = make_stream(StreamSpec(lines=12, query_every=3, distances=(1, 4, 2), seed=4))
    assert other.keys != make_stream(SPEC).keys


def test_every_query_asks_a_registered_line_once_at_its_distance():
    s = make_stream(StreamSpec(lines=200, query_every=10, distances=(5, 10, 20, 40)))
    lines = [q.line for q in s.queries]
    assert len(lines) == len(set(lines)) == 20  # one query per slot, no line asked twice
    assert len(set(s.keys)) == len(s.keys)
    for q in s.queries:
        assert (s.keys[q.line], s.values[q.line]) == (q.key, q.value)
        assert q.at_line % 10 == 0 and q.distance == q.at_line - q.line
        assert q.nominal <= q.distance <= q.nominal + 2  # nearest older unasked line
    assert {q.nominal for q in s.queries} == {5, 10, 20, 40}


def test_the_value_sits_exactly_where_the_format_says(model, pieces, byte_tok):
    stream = make_stream(SPEC)
    run = run_streameval(model, pieces, stream, None, answer_tokens=3)
    assert run.ids.numel() == stream_tokens(pieces, stream, 3)
    text = byte_tok.decode(run.ids.tolist())
    for n in range(len(stream.keys)):
        assert LINE.format(key=stream.keys[n], value=stream.values[n]) in text
    for a in run.answers:  # the value's tokens, a known distance before the answer, decode to the value
        start = a.at[0] - a.token_distance
        assert byte_tok.decode(run.ids[start:start + len(str(a.query.value))].tolist()) == str(a.query.value)


@pytest.mark.parametrize("text, value, ok", [
    ("24169>", 24169, True), ("the REGISTER_CONTENT is 24169", 24169, True), ("24169 1", 24169, True),
    ("2416", 24169, False), ("124169", 24169, False), ("1 24169", 24169, False), ("", 24169, False),
    ("<>", 7, False)])
def test_the_scorer_accepts_only_the_right_first_number(text, value, ok):
    assert is_correct(text, value) is ok
    assert first_number("abc") is None


def test_full_cache_answers_equal_re_encoding_the_prefix(model, pieces):
    run = run_streameval(model, pieces, make_stream(SPEC), None, answer_tokens=3)
    with torch.no_grad():
        for a in run.answers:
            for t in a.at:  # each generated token is the argmax of a fresh dense forward over the stream so far
                assert model(run.ids[None, :t + 1]).logits[0, -1].argmax() == run.ids[t + 1]
            assert a.kept == 1.0


def test_answers_through_an_evicting_cache_equal_a_dense_forward_over_the_kept_tokens(model, pieces):
    budget, n_sink = 160, 2
    stream = make_stream(SPEC)
    cache = PolicyCache(model, make_policy("sinks", budget, n_sink=n_sink), "original")
    run = run_streameval(model, pieces, stream, cache, answer_tokens=3)
    assert run.ids.numel() > 3 * budget  # the cache did evict
    assert cache.stored() <= budget + 1
    with torch.no_grad():
        for a in run.answers:
            for t in a.at:  # the cache held the sinks and the last budget - n_sink tokens before t, then t
                kept = torch.tensor(sorted({*range(n_sink), *range(max(0, t - budget + n_sink), t + 1)}))
                logits = model(run.ids[None, kept], position_ids=kept[None]).logits[0, -1]
                assert logits.argmax() == run.ids[t + 1]
            evicted = a.token_distance > budget - n_sink
            assert a.kept == (0.0 if evicted else 1.0)


@pytest.mark.slow
def test_h2o_reports_the_share_of_heads_that_kept_the_value(model, pieces):
    cache = PolicyCache(model, make_policy("sinks+h2o", 160, n_sink=2, recent=40), "rolling")
    run = run_streameval(model, pieces, make_stream(SPEC), cache, answer_tokens=3)
    assert all(0.0 <= a.kept <= 1.0 for a in run.answers)
    assert any(a.token_distance > 160 for a in run.answers)


CHATML = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endfor %}"


def test_a_chat_stream_is_the_conversation_the_template_renders(model):
    """chat=true: lines and each question a user turn, each answer (from ANSWER on) the assistant's turn; the
    tokens fed decode to exactly what the model's chat template renders for that conversation."""
    from tiny_models import byte_tokenizer

    tok = byte_tokenizer()
    tok.chat_template = CHATML
    stream = make_stream(SPEC)
    run = run_streameval(model, Pieces(tok, chat=True), stream, None, answer_tokens=3)
    turns, user, answers = [], HEADER, iter(run.answers)
    for n in range(len(stream.keys)):
        user += LINE.format(key=stream.keys[n], value=stream.values[n])
        for q in [q for q in stream.queries if q.at_line == n + 1]:
            turns += [{"role": "user", "content": user + QUESTION.format(key=q.key)},
                      {"role": "assistant", "content": ANSWER.format(key=q.key) + next(answers).text}]
            user = ""
    rendered = tok.apply_chat_template(turns + [{"role": "user", "content": user}], tokenize=False)
    fed = tok.decode(run.ids.tolist())
    assert rendered == fed + "<|end|>\n"  # the stream stops inside its last user turn
    assert len(run.answers) == len(stream.queries) > 0


def test_chat_needs_a_chat_template(byte_tok):
    with pytest.raises(UsageError, match="has no chat template"):
        Pieces(byte_tok, chat=True)


def test_bad_streams_and_budgets_are_one_clear_error(pieces):
    with pytest.raises(ConfigError, match="longer than the stream"):
        StreamSpec(lines=10, distances=(20,))
    with pytest.raises(ConfigError, match="distances"):
        StreamSpec(lines=10, distances=())
    with pytest.raises(UsageError, match="smaller than 4 sink"):
        check_budget(pieces, make_stream(SPEC), 64, 4, 6)
    check_budget(pieces, make_stream(SPEC), 400, 4, 6)


@pytest.mark.slow
def test_passkey_in_place_with_the_full_cache_equals_prefill_then_greedy(model, byte_tok):
    from attnlab.evals.passkey import build_prompts, passkey_cases, retrieve
    from attnlab.recall.decode import passkey_in_place

    prompts = build_prompts(byte_tok, passkey_cases([420], [0.0, 1.0], 1))
    rows = passkey_in_place(model, byte_tok, prompts, lambda: None, max_new=4)
    for row, ids in zip(rows, prompts.values()):
        assert row["output"] == retrieve(model, byte_tok, ids, max_new=4) and row["kept"] == 1.0
    sinks = make_policy("sinks", 200, n_sink=2)
    evicting = passkey_in_place(model, byte_tok, prompts, lambda: PolicyCache(model, sinks))
    assert [r["kept"] for r in evicting] == [0.0, 1.0]  # the key at depth 0 is evicted, at depth 1 it is recent
