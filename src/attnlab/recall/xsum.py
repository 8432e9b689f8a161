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


def read_xsum(path: Path, n: int, seed: int = 0, max_words: int = 0) -> list[Article]:
    """``n`` articles drawn (seeded) from the file -- among those of at most ``max_words`` words if that is set
    (the quick mode's short prompts); a missing file or a line without the fields is one error."""
    if not path.is_file():
        raise ConfigError(f"{path}: no XSum file; give H2O's xsum_0shot.jsonl (JSON lines with fields "
                          f"{', '.join(FIELDS)}) with --set data=PATH")
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"{path}:{i + 1}: not JSON; each line must be an object with fields "
                              f"{', '.join(FIELDS)}") from None
        if not isinstance(row, dict) or any(not isinstance(row.get(f), str) for f in FIELDS):
            raise ConfigError(f"{path}:{i + 1}: needs string fields {', '.join(FIELDS)} (H2O's xsum_0shot.jsonl)")
        if not max_words or len(row["article"].split()) <= max_words:
            rows.append(Article(i, row["article"], row["summary_gt"]))
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
