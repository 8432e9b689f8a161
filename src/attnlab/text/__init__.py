"""Real text for the training lab: corpora, tokenizers and language-model batching.

- :mod:`.corpus` — read WikiText-style files (tokenized v1 with ``<unk>``, or raw), plain text
  files and folders into lists of lines; missing or empty input is a one-line error.
- :mod:`.vocab` — the ``basic_english`` word tokenizer and a frequency-ordered vocabulary.
- :mod:`.batching` — the PyTorch tutorial's bptt batching and random-window batching.
"""
