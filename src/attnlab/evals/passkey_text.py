"""The passkey protocol's text (PI, landmark attention, YaRN), pure Python: the prompt's pieces and how an answer
is read, shared by the passkey grid (:mod:`attnlab.evals.passkey`) and the leaderboard's ``passkey`` task."""
from __future__ import annotations

import re

INSTRUCTION = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
               "I will quiz you about the important information there.")
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
KEY_SENTENCE = " The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = " What is the pass key? The pass key is"
KEY_RANGE = (1, 50000)
FIRST_INT = re.compile(r"\d+")


def answer_of(text: str) -> int | None:
    """The protocol's reading of a continuation: its first integer, or None."""
    m = FIRST_INT.search(text)
    return int(m.group()) if m else None
