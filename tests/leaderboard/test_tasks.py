"""The RULER-style tasks, generated from a made-up haystack and counted in whitespace words: each item fits its
length, hides exactly what its answers say, is the same for the same seed, and is scored as RULER scores."""
import random
from collections import Counter

import pytest

from attnlab.core.errors import UsageError
from attnlab.leaderboard.tasks import TASKS, Haystack, Item, make_items, score

WORDS = [f"{a}{b}word" for a in "abcdefghij" for b in "klmnopqrst"]  # 100 distinct words of 6 letters


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(scope="module")
def hay():
    rng = random.Random(0)
    return Haystack(tuple(" ".join(rng.choices(WORDS, k=12)) + "." for _ in range(400)))


@pytest.mark.parametrize("task", TASKS.names())
@pytest.mark.parametrize("length", [300, 900])
def test_each_item_fits_its_length_and_is_fixed_by_its_seed(hay, task, length):
    items = make_items(task, hay, words, length, n=3, seed=1)
    assert all(words(i.prompt) <= length for i in items)
    assert all(words(i.prompt) > 0.8 * length for i in items)  # filled, not merely short
    assert items == make_items(task, hay, words, length, n=3, seed=1) != make_items(task, hay, words, length, 3, 2)
    assert len({i.context for i in items}) == 3 and all(i.answers for i in items)


@pytest.mark.parametrize("task, keys, asked", [("niah_single", 1, 1), ("niah_multikey", 4, 1),
                                               ("niah_multivalue", 1, 4), ("niah_multiquery", 4, 4)])
def test_the_needles_hold_exactly_the_answers(hay, task, keys, asked):
    (item,) = make_items(task, hay, words, 600, n=1)
    needles = [s for s in item.context.split(". ") if "special magic numbers for" in s and ": " in s]
    assert len(needles) == max(keys, asked) and len({n.split(" is: ")[0] for n in needles}) == keys
    assert len(item.answers) == asked and all(a in item.context for a in item.answers)
    assert all(item.context.count(a) == 1 for a in item.answers)


def test_variable_tracking_names_the_whole_chain(hay):
    (item,) = make_items("vt", hay, words, 600, n=1, hops=3)
    value = item.question.split("assigned the value ")[1].split()[0]
    first = item.answers[0]
    assert f"VAR {first} = {value}." in item.context and len(item.answers) == 4
    for a, b in zip(item.answers, item.answers[1:]):
        assert f"VAR {b} = VAR {a}." in item.context


def test_common_words_are_the_most_common_and_frequent_words_the_most_frequent(hay):
    (cwe,) = make_items("cwe", hay, words, 900, n=1, common=5, repeats=10)
    listed = Counter(w for w in cwe.context.split() if w.isalpha() and w.endswith("word"))
    top = {w for w, _ in listed.most_common(5)}
    assert top == set(cwe.answers) and min(listed[w] for w in top) > max(c for w, c in listed.items() if w not in top)
    (fwe,) = make_items("fwe", hay, words, 900, n=1)
    coded = Counter(fwe.context.splitlines()[1].split())
    ranked = coded.most_common(4)
    assert [w for w, _ in ranked[:3]] == list(fwe.answers) and ranked[2][1] > ranked[3][1]  # no tie at the third


def test_passkey_is_the_protocols_prompt_and_reading(hay):
    from attnlab.evals.passkey_text import FILLER, INSTRUCTION, QUESTION

    (item,) = make_items("passkey", hay, words, 600, n=1)
    (key,) = item.answers
    assert item.context.startswith(INSTRUCTION) and item.question == QUESTION
    assert f"The pass key is {key}. Remember it. {key} is the pass key." in item.context
    assert item.context.replace(f" The pass key is {key}. Remember it. {key} is the pass key.", "") == \
        INSTRUCTION + FILLER * item.context.count("The grass is green")  # nothing else: filler and the key
    assert score(item, f" {key}. The") == 1.0 and score(item, "9 then " + key) == 0.0  # the first integer only
    assert score(item, f" {int(key) + 1}") == 0.0


def test_mqar_lists_every_pair_before_the_gap_and_asks_some(hay):
    (item,) = make_items("mqar", hay, words, 600, n=1, pairs=6, queries=3)
    block = item.context.split(" key-value pairs: ")[1].split(". Memorize")[0]
    pairs = dict(p.split() for p in block.split(", "))
    asked = item.question.split("values of ")[1].split(" in the pairs")[0].split(", ")
    assert len(pairs) == 6 and len(asked) == 3 and item.answers == tuple(pairs[k] for k in asked)
    assert all(item.context.count(v) == 1 for v in pairs.values())  # the haystack hides no second copy
    with pytest.raises(UsageError, match="queries=7 out of pairs=6"):
        make_items("mqar", hay, words, 600, n=1, pairs=6, queries=7)


def test_scoring_is_rulers_string_match():
    item = Item("niah_multivalue", "c", "q", ("1234567", "7654321"))
    assert score(item, "they are 1234567 and 7654321.") == 1.0
    assert score(item, "1234567 only") == 0.5 and score(item, "") == 0.0
    part = Item("x", "c", "q", ("Paris", "paris, france"), match="part")
    assert score(part, "it is PARIS") == 1.0 and score(part, "Lyon") == 0.0


def test_bad_input_is_one_line(hay):
    with pytest.raises(UsageError, match="did you mean 'niah_single'"):
        make_items("niah_singel", hay, words, 600, n=1)
    with pytest.raises(UsageError, match="give a longer length"):
        make_items("niah_multiquery", hay, words, 40, n=1)
    with pytest.raises(UsageError, match="task 'mqar' takes no option 'needles' \\(its options: pairs, queries\\)"):
        make_items("mqar", hay, words, 600, n=1, needles=3)
    with pytest.raises(UsageError, match="task 'passkey' takes no option 'hops' \\(it takes none\\)"):
        make_items("passkey", hay, words, 600, n=1, hops=3)
    with pytest.raises(UsageError, match="at least 2 sentences"):
        Haystack(("one.",))
    with pytest.raises(UsageError, match="at least 40"):
        make_items("niah_single", Haystack(("a b c.", "d e f.")), words, 600, n=1)


def test_a_wrapped_text_becomes_its_sentences():
    from attnlab.leaderboard.tasks import haystack_from

    lines = ["It was a dark and stormy", "night. The rain fell in torrents!", "", "Why? Nobody knew why it fell."]
    assert haystack_from(lines).sentences == ("It was a dark and stormy night.", "The rain fell in torrents!",
                                              "Nobody knew why it fell.")
