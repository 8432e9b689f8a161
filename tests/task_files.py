"""Tiny task files of the three shapes attnlab eval reads (choice, partial, cloze), written by the tests."""
import json
import random

WORDS = "the cat dog sat ran on a mat log red blue big small".split()


def write_tasks(folder, n=10, seed=0):
    """Tiny task files of the three shapes (choice, partial, cloze)."""
    rng = random.Random(seed)
    say = lambda k: " ".join(rng.choice(WORDS) for _ in range(k))  # noqa: E731
    folder.mkdir(parents=True, exist_ok=True)
    lines = {"copa.jsonl": [{"query": say(6) + ", therefore", "choices": [say(3) + ".", say(4) + "."], "gold": i % 2}
                            for i in range(n)],
             "winogrande.jsonl": [{"context_options": [(c := say(5)) + " so Ann", c + " so Bob"],
                                   "continuation": "got the " + say(2) + ".", "gold": i % 2} for i in range(n)],
             "lambada_openai.jsonl": [{"context": say(12), "continuation": rng.choice(WORDS)} for _ in range(n)]}
    for name, items in lines.items():
        (folder / name).write_text("".join(json.dumps(x) + "\n" for x in items))
    return folder
