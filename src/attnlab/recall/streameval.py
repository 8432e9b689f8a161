"""StreamEval (StreamingLLM, appendix; its data and code were never released), written from the paper's
description: a stream of short lines in LongEval's line-retrieval format, each registering a value under a
key, with a query every ``query_every`` lines about the line ``distance`` lines back. The model answers
greedily *in place* -- the stream is fed once, token by token, through the cache -- and an answer counts
iff the first number it produces equals the registered value.

The exact format (``HEADER``, then per line ``LINE``; a query is ``QUESTION`` followed by ``ANSWER``, whose
last character ``<`` is where the model takes over)::

    line torpid-kid: REGISTER_CONTENT is <24169>
    ...
    Tell me what is the REGISTER_CONTENT in line torpid-kid? I need the number.
    Answer: line torpid-kid: REGISTER_CONTENT is <

LongEval asks the question alone; the answer's opening words (``ANSWER``) are ours: they make the format
of the reply the model's to copy, so a small base or instruction model is scored on *retrieval*, not on
following an answer format. The model then writes ``answer_tokens`` tokens (always that many, so the stream
has the same length under every policy); they stay in the cache, as a conversation's turns would, followed
by ``ANSWER_END``, and the stream goes on. Queries cycle through ``distances``; a line is asked about at most
once, so an answer never repeats a value a later query needs (a query whose line was asked already goes a
line or two further back; ``Query.distance`` is the exact one). Everything follows from ``seed``.

Pure Python (no torch, no transformers): tokenising and decoding live in :mod:`attnlab.recall.decode`.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from attnlab.core.errors import ConfigError

HEADER = ("Below is a record of lines. Each line registers a number, its REGISTER_CONTENT, under a line name. "
          "Remember them: from time to time I will ask for the REGISTER_CONTENT of one line.\n")
LINE = "line {key}: REGISTER_CONTENT is <{value}>\n"
QUESTION = "Tell me what is the REGISTER_CONTENT in line {key}? I need the number.\n"
ANSWER = "Answer: line {key}: REGISTER_CONTENT is <"
ANSWER_END = "\n"  # after the model's answer, before the stream goes on
VALUES = (1, 50000)  # LongEval's range for a register's content

# Line names are adjective-noun pairs, as LongEval's ("torpid-kid"): 48 x 48 = 2,304 distinct names
ADJECTIVES = tuple("""able ashy bald bold brave brisk busy calm cold coy damp dark deft dry dull eager
fair fast fine fond glad grim hazy idle jolly keen lame late lean loud lush meek mild neat odd pale plain
proud quick rapid rare ripe shy slim sly tame torpid vast""".split())
NOUNS = tuple("""ant bay bee cat cod cow den doe dog eel elk emu fawn fig fox gnu hen hog jay kid kit
lark lamb lynx mole moth mule newt owl ox pig pike pug ram rat seal slug swan toad tuna vole wasp wolf wren
yak yew zebu crab""".split())


@dataclass(frozen=True)
class Query:
    at_line: int  # the query follows this many lines of the stream
    line: int  # the index of the line it asks about
    key: str
    value: int
    nominal: int  # the distance of the cycle this query stands for (``distance`` is it or a few lines more)

    @property
    def distance(self) -> int:
        """Lines between the registered line and the query (1: the line just before it)."""
        return self.at_line - self.line


@dataclass(frozen=True)
class StreamSpec:
    lines: int = 400  # lines in the stream
    query_every: int = 10  # a query after every this many lines (StreamEval's 10)
    distances: tuple[int, ...] = (5, 10, 20, 40)  # in lines; queries cycle through them
    seed: int = 0

    def __post_init__(self):
        if self.lines < 1 or self.query_every < 1:
            raise ConfigError(f"lines={self.lines}, query_every={self.query_every}: both must be >= 1")
        if not self.distances or min(self.distances) < 1:
            raise ConfigError(f"distances={self.distances}: give line distances >= 1, e.g. distances=5,10,20")
        if max(self.distances) > self.lines:
            raise ConfigError(f"distance {max(self.distances)} is longer than the stream ({self.lines} lines): "
                              "raise lines or drop that distance")
        if self.lines > len(ADJECTIVES) * len(NOUNS):
            raise ConfigError(f"lines={self.lines}: at most {len(ADJECTIVES) * len(NOUNS)} distinct line names")


@dataclass(frozen=True)
class Stream:
    keys: tuple[str, ...]  # line i registers values[i] under keys[i]
    values: tuple[int, ...]
    queries: tuple[Query, ...]  # in stream order


def make_stream(spec: StreamSpec) -> Stream:
    """The lines and queries of ``spec``, the same for the same seed. Query slot k asks at the k-th
    distance of the cycle (or a few lines further back where that line was asked already); a slot whose
    line would precede the stream is skipped."""
    rng = random.Random(spec.seed)
    names = rng.sample([f"{a}-{n}" for a in ADJECTIVES for n in NOUNS], spec.lines)
    values = [rng.randint(*VALUES) for _ in range(spec.lines)]
    queries, asked = [], set()
    slots = range(spec.query_every, spec.lines + 1, spec.query_every)
    for turn, at in enumerate(slots):
        d = spec.distances[turn % len(spec.distances)]
        # the line d back, or the nearest older one not asked about yet (queries of different distances
        # would otherwise land on the same line: at - d repeats whenever distances differ by query_every)
        line = next((ln for ln in range(at - d, -1, -1) if ln not in asked), None) if at >= d else None
        if line is not None:
            asked.add(line)
            queries.append(Query(at, line, names[line], values[line], d))
    return Stream(tuple(names), tuple(values), tuple(queries))


FIRST_NUMBER = re.compile(r"\d+")


def first_number(text: str) -> int | None:
    m = FIRST_NUMBER.search(text)
    return int(m.group()) if m else None


def is_correct(answer: str, value: int) -> bool:
    """StreamEval's scorer: the first number the model produced equals the registered value."""
    return first_number(answer) == value
