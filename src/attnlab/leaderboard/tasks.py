"""RULER-style long-context tasks (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context
Language Models?"), generated here from any text as the haystack: nothing is downloaded, and a seed fixes every
item. Pure Python: the caller gives the haystack's sentences and its tokenizer's count, so each prompt is cut to
``length`` tokens of that tokenizer.

The tasks, as RULER defines them (its four categories but question answering):

- retrieval, needle in a haystack: ``niah_single`` (one key's number), ``niah_multikey`` (one key asked among
  ``needles`` keys), ``niah_multivalue`` (every number of one key), ``niah_multiquery`` (every asked key's);
- multi-hop tracing: ``vt``, variable tracking (a value passed along a chain of ``hops`` assignments; name every
  variable that holds it);
- aggregation: ``cwe``, common words (the ``common`` words repeated most often in a numbered list of words),
  and ``fwe``, frequent words (the three most frequent coded words of a Zipf-distributed text).

attnlab's own two retrieval tests join them: ``passkey`` (the PI / YaRN protocol of :mod:`attnlab.evals.passkey`:
one key in repeated filler, read as the continuation's first integer) and ``mqar`` (multi-query associative recall,
Arora et al. 2023, in words: every key-value pair in one block right after the instruction, the haystack as the
gap, then the queries: recall at the longest distance the prompt allows).

An item is a ``context`` (the instruction, the haystack and what is hidden in it: what a KV method compresses)
and a ``question`` after it (kept whole), with its ``answers``; :func:`score` matches them as RULER does, each
answer a case-insensitive substring of the prediction: the share found (``all``) or whether any is (``part``);
``passkey`` reads its answer as that protocol does (``first``: the first integer equals the key).
"""
from __future__ import annotations

import inspect
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry
from attnlab.evals.passkey_text import FILLER, INSTRUCTION, KEY_RANGE, KEY_SENTENCE, QUESTION, answer_of

Count = Callable[[str], int]  # a text's length in the model's tokens


@dataclass(frozen=True)
class Item:
    task: str
    context: str  # instruction + haystack with what is hidden in it: what a KV method may compress
    question: str  # asked after the context, ending where the answer starts
    answers: tuple[str, ...]
    match: str = "all"  # "all": the share of answers found; "part": 1 if any is found; "first": the first integer

    @property
    def prompt(self) -> str:
        return self.context + self.question


def score(item: Item, prediction: str) -> float:
    """RULER's string match: each answer a case-insensitive substring of the prediction (the passkey protocol's
    ``first``: the prediction's first integer is the answer)."""
    if item.match == "first":
        return float(str(answer_of(prediction)) == item.answers[0])
    found = [a.lower() in prediction.lower() for a in item.answers]
    return sum(found) / len(found) if item.match == "all" else float(any(found))


@dataclass(frozen=True)
class Haystack:
    """The text the tasks hide things in: its sentences, and the words they draw keys and word lists from."""

    sentences: tuple[str, ...]

    def __post_init__(self):
        if len(self.sentences) < 2:
            raise UsageError("a haystack needs at least 2 sentences: give a longer text")

    @cached_property
    def words(self) -> list[str]:
        """Distinct lowercase alphabetic words of 5 letters or more, in order of first use (read once)."""
        seen = dict.fromkeys(w.lower() for s in self.sentences for w in s.split() if w.isalpha() and len(w) >= 5)
        if len(seen) < 40:
            raise UsageError(f"the haystack has {len(seen)} distinct words of 5+ letters; the tasks draw keys and "
                             "word lists from at least 40: give a longer text")
        return list(seen)


def haystack_from(lines: list[str], limit: int = 20_000) -> Haystack:
    """The first ``limit`` sentences of a text given as lines (wrapped prose: a sentence may span lines, a blank
    line ends a paragraph), whitespace collapsed."""
    text = " ".join(" ".join(lines).split())
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 3]
    return Haystack(tuple(sentences[:limit]))


def most(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with ``fits(n)`` (``fits`` true up to some n, false after): a binary search, so a
    prompt is cut to its length in a dozen tokenizer calls. ``lo`` when none fits (the caller checks it)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def fit(rng: random.Random, hay: Haystack, hidden: list[str], head: str, question: str, count: Count,
        length: int) -> str:
    """The context: ``head``, then as many consecutive haystack sentences (from a random start) as keep the
    prompt within ``length`` tokens, with each ``hidden`` sentence put between two of them at a random depth."""
    start = rng.randrange(len(hay.sentences))
    ring = hay.sentences[start:] + hay.sentences[:start]
    depths = sorted(rng.random() for _ in hidden)

    def build(n: int) -> str:
        body = list(ring[:n])
        for depth, sentence in sorted(zip(depths, hidden), reverse=True):  # the deepest first: indices hold
            body.insert(round(depth * n), sentence)
        return head + " ".join(body)

    lo = most(lambda n: count(build(n) + question) <= length, 0, min(len(ring), length))  # a sentence >= a token
    if count(build(lo) + question) > length:
        raise UsageError(f"length {length}: the instruction, question and hidden sentences alone take more tokens; "
                         "give a longer length")
    return build(lo)


TASKS: Registry[Callable[..., Item]] = Registry("RULER task")
NEEDLE = "One of the special magic numbers for {key} is: {value}. "
NIAH_HEAD = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. I will "
             "quiz you about the numbers afterwards.\n")


def _number(rng: random.Random) -> str:
    return str(rng.randrange(1_000_000, 10_000_000))  # RULER's values: 7-digit numbers


def _niah(name: str, keys: int, values: int, asked: int):
    """A needle task: ``keys`` keys, ``values`` numbers each, ``asked`` of the keys asked about."""
    def make(rng: random.Random, hay: Haystack, count: Count, length: int, needles: int = 4) -> Item:
        k = needles if keys < 0 else keys
        names = rng.sample(hay.words, k)
        numbers = {key: [_number(rng) for _ in range(needles if values < 0 else values)] for key in names}
        hidden = [NEEDLE.format(key=key, value=v) for key in names for v in numbers[key]]
        ask = names[:needles if asked < 0 else asked]
        what = "numbers" if len(ask) > 1 or len(numbers[ask[0]]) > 1 else "number"
        question = (f"\nWhat are all the special magic numbers for {', '.join(ask)} mentioned in the provided text? "
                    f"The special magic {what} for {', '.join(ask)} mentioned in the provided text are"
                    if what == "numbers" else
                    f"\nWhat is the special magic number for {ask[0]} mentioned in the provided text? The special "
                    f"magic number for {ask[0]} mentioned in the provided text is")
        context = fit(rng, hay, hidden, NIAH_HEAD, question, count, length)
        return Item(name, context, question, tuple(v for key in ask for v in numbers[key]))
    return make


TASKS.add("niah_single", _niah("niah_single", 1, 1, 1))
TASKS.add("niah_multikey", _niah("niah_multikey", -1, 1, 1))  # one asked, the other keys distract
TASKS.add("niah_multivalue", _niah("niah_multivalue", 1, -1, 1))
TASKS.add("niah_multiquery", _niah("niah_multiquery", -1, 1, -1))


@TASKS.register("vt")
def variable_tracking(rng: random.Random, hay: Haystack, count: Count, length: int, hops: int = 4) -> Item:
    """A value assigned to a first variable, then passed along ``hops`` assignments between distinct variables."""
    names = ["".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5)) for _ in range(hops + 1)]
    value = str(rng.randrange(10_000, 100_000))
    hidden = [f"VAR {names[0]} = {value}. "] + [f"VAR {b} = VAR {a}. " for a, b in zip(names, names[1:])]
    head = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n")
    question = (f"\nQuestion: Find all variables that are assigned the value {value} in the text above. Answer: "
                f"According to the chain(s) of variable assignment in the text above, {hops + 1} variables are "
                f"assigned the value {value}, they are:")
    return Item("vt", fit(rng, hay, hidden, head, question, count, length), question, tuple(names))


@TASKS.register("cwe")
def common_words(rng: random.Random, hay: Haystack, count: Count, length: int, common: int = 10,
                 repeats: int | None = None, rare_repeats: int = 3) -> Item:
    """A numbered list of words: ``common`` words ``repeats`` times each (RULER's 30, or fewer so that they take
    at most half the prompt), as many others ``rare_repeats`` times as fit; name the ``common`` most common."""
    words = rng.sample(hay.words, len(hay.words))
    chosen, others = words[:common], words[common:]
    head = "Below is a numbered list of words. In these words, some appear more often than others. Memorize the " \
           "ones that appear most often.\n"
    question = (f"\nQuestion: What are the {common} most common words in the above list? Answer: The top {common} "
                "words that appear most often in the list are:")

    def listing(n_rare: int, reps: int) -> str:
        pool = [w for w in chosen for _ in range(reps)] + [w for w in others[:n_rare] for _ in range(rare_repeats)]
        random.Random(n_rare).shuffle(pool)  # the same order for the same size: the search below compares sizes
        return head + " ".join(f"{i + 1}. {w}" for i, w in enumerate(pool))

    if repeats is None:
        repeats = 30
        while repeats > rare_repeats + 1 and count(listing(0, repeats)) > length // 2:
            repeats -= 1
    lo = most(lambda n: count(listing(n, repeats) + question) <= length, 0, len(others))
    if count(listing(lo, repeats) + question) > length:
        raise UsageError(f"length {length}: {common} words repeated {repeats} times take more tokens; give a longer "
                         "length or fewer common words")
    return Item("cwe", listing(lo, repeats), question, tuple(chosen))


@TASKS.register("fwe")
def frequent_words(rng: random.Random, hay: Haystack, count: Count, length: int, vocabulary: int = 400,
                   alpha: float = 2.0) -> Item:
    """Coded words (random letters) drawn by Zipf's law of exponent ``alpha``; name the three most frequent."""
    coded = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)) for _ in range(vocabulary)]
    weights = [1 / (r + 1) ** alpha for r in range(vocabulary)]
    draws = rng.choices(coded, weights, k=max(1, length))  # more than fit: the prompt takes a prefix
    head = "Read the following coded text and track the frequency of each coded word. Find the three most " \
           "frequently appeared coded words.\n"
    question = ("\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
                "frequently appeared words in the above coded text? Answer: According to the coded text above, the "
                "three most frequently appeared words are:")
    lo = most(lambda n: count(head + " ".join(draws[:n]) + question) <= length, 1, len(draws))
    top = [w for w, _ in Counter(draws[:lo]).most_common(3)]
    return Item("fwe", head + " ".join(draws[:lo]), question, tuple(top))


@TASKS.register("passkey")
def passkey(rng: random.Random, hay: Haystack, count: Count, length: int) -> Item:
    """The passkey protocol: the key sentence at a random depth of the filler repeated to ``length`` tokens (the
    haystack is not read: the protocol's filler is the point, a text that says nothing)."""
    key = str(rng.randint(*KEY_RANGE))
    depth = rng.random()

    def build(n: int) -> str:
        at = round(depth * n)
        return INSTRUCTION + FILLER * at + KEY_SENTENCE.format(key=key) + FILLER * (n - at)

    n = most(lambda n: count(build(n) + QUESTION) <= length, 0, 2 * length // max(1, count(FILLER) - 1) + 1)
    if count(build(n) + QUESTION) > length:
        raise UsageError(f"length {length}: the passkey instruction, key and question alone take more tokens; give "
                         "a longer length")
    return Item("passkey", build(n), QUESTION, (key,), match="first")


@TASKS.register("mqar")
def mqar(rng: random.Random, hay: Haystack, count: Count, length: int, pairs: int = 8, queries: int = 2) -> Item:
    """``pairs`` key words with a 4-digit value each, listed together right after the instruction; the haystack
    fills the rest; the question asks for ``queries`` of them (MQAR's layout: pairs, gap, queries)."""
    if not 1 <= queries <= pairs:
        raise UsageError(f"mqar: queries={queries} out of pairs={pairs}: give 1 <= queries <= pairs")
    keys = rng.sample(hay.words, pairs)
    values = [str(v) for v in rng.sample(range(1000, 10_000), pairs)]
    block = ", ".join(f"{k} {v}" for k, v in zip(keys, values))
    head = (f"Here are {pairs} key-value pairs: {block}. Memorize them: a long text follows, then you will be asked "
            "for the values of some keys.\n")
    asked = rng.sample(range(pairs), queries)
    names = ", ".join(keys[i] for i in asked)
    question = (f"\nWhat is the value of {names} in the pairs above? The value of {names} is" if queries == 1 else
                f"\nWhat are the values of {names} in the pairs above? The values of {names} are")
    return Item("mqar", fit(rng, hay, [], head, question, count, length), question,
                tuple(values[i] for i in asked))


def make_items(task: str, hay: Haystack, count: Count, length: int, n: int, seed: int = 0, **options) -> list[Item]:
    """``n`` items of ``task`` of at most ``length`` tokens each; item i drawn from seed (seed, task, length, i)."""
    make = TASKS.get(task)
    takes = list(inspect.signature(make).parameters)[4:]  # after (rng, hay, count, length): the task's options
    if unknown := [k for k in options if k not in takes]:
        raise UsageError(f"task {task!r} takes no option {unknown[0]!r} ("
                         + (f"its options: {', '.join(takes)})" if takes else "it takes none)"))
    return [make(random.Random(f"{seed}/{task}/{length}/{i}"), hay, count, length, **options) for i in range(n)]
