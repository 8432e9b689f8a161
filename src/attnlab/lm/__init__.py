"""Language models written in plain PyTorch (no ``transformers``): the training lab's models.

- :mod:`.tutorial` — the PyTorch word-language-model tutorial transformer the Scan&Snap and
  JoMA authors trained on WikiText-2, returning its attention maps.
"""
