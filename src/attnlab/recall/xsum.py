"""H2O's own generation check, the data side: XSum articles in H2O's 0-shot prompt, ROUGE, repetition.

The file is H2O's evaluation input (``xsum/xsum_0shot.jsonl``): one JSON object a line with ``article``
(the whole prompt, "###\\nArticle: ... Summarize the above article in 1 sentence.\\n") and ``summary_gt``
(the reference). ROUGE-1/2/L F-measures come from Google's ``rouge-score`` package (the ROUGE-1.5.5
re-implementation HELM and lm-evaluation-harness use), with stemming, as H2O's scorer.

Pure Python: no torch, no transformers.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import ConfigError

FIELDS = ("article", "summary_gt")
STOP = "###"  # H2O's stop sequence: the summary ends where the next "###" would begin
ROUGE = ("rouge1", "rouge2", "rougeL")
# the seed talk's qualitative example (H2O, Fig. 1's prompt): continued under full, local 20% and H2O 20%
CAFE = ("In a small, bustling cafe nestled in the heart of a vibrant city, a serendipitous event unfolded, leaving "
        "a lasting impression on all who witnessed it. As the patrons sat sipping their coffees and engaging in "
        "animated conversations, a talented street musician entered the cafe, carrying a weathered guitar and "
        "radiating an aura of creativity.")


@dataclass(frozen=True)
class Article:
    index: int  # line in the file
    prompt: str
    reference: str


def _not_xsum(path: Path, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {problem}; --set data= must name H2O's JSON-lines XSum file (xsum_0shot.jsonl: "
                       f"an object a line with string fields {', '.join(FIELDS)})")


def read_xsum(path: Path, n: int, seed: int = 0, max_words: int = 0) -> list[Article]:
    """``n`` articles drawn (seeded) from the file -- among those of at most ``max_words`` words if that is set
    (the quick mode's short prompts). A file that is not H2O's (missing, binary, not JSON lines, other fields,
    empty) is one ConfigError naming it."""
    if not path.is_file():
        raise _not_xsum(path, "no such file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise _not_xsum(path, f"not UTF-8 text (byte {e.start})") from None
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise _not_xsum(path, f"line {i + 1} is not JSON") from None
        if missing := [f for f in FIELDS if not isinstance(row, dict) or not isinstance(row.get(f), str)]:
            raise _not_xsum(path, f"line {i + 1} has no string field {' or '.join(missing)}")
        if not max_words or len(row["article"].split()) <= max_words:
            rows.append(Article(i, row["article"], row["summary_gt"]))
    if not any(line.strip() for line in lines):
        raise _not_xsum(path, "the file is empty")
    if n < 1 or n > len(rows):
        raise ConfigError(f"articles={n}: the file has {len(rows)}" + (f" of at most {max_words} words" if max_words
                          else "") + f"; give 1..{len(rows)}")
    return sorted(random.Random(seed).sample(rows, n), key=lambda a: a.index)


def summary_of(text: str) -> str:
    """The generated text up to H2O's stop sequence, stripped."""
    return text.split(STOP)[0].strip()


def rouge(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1/2/L F-measures (stemmed)."""
    from rouge_score import rouge_scorer  # the maintained package; imported where it is used

    scores = rouge_scorer.RougeScorer(list(ROUGE), use_stemmer=True).score(reference, prediction)
    return {k: scores[k].fmeasure for k in ROUGE}


def repeated_ngrams(text: str, n: int = 3) -> float:
    """Share of the text's word n-grams that already occurred earlier in it (0: none repeats; a loop -> 1)."""
    words = text.split()
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    seen, repeats = set(), 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams) if grams else 0.0


def budget_of(prompt_tokens: int, ratio: float, recent_share: float, n_sink: int) -> tuple[int, int]:
    """(budget, recent) for one prompt: ``ratio`` of its tokens, at least the sinks + 2."""
    budget = max(n_sink + 2, math.ceil(ratio * prompt_tokens))
    return budget, max(1, min(budget - n_sink - 1, round(recent_share * budget)))
