"""Everything that touches Hugging Face libraries (``transformers``, ``tokenizers``, ``datasets``)
lives here, and only here; ``transformers`` is pinned to one minor version in pyproject.toml.

- :mod:`.tokenizer` — the training lab's tokenizers as HF fast tokenizers: the word-level
  ``basic_english`` scheme (exactly), a byte-level BPE trained locally and cached, any folder.
- :mod:`.causal_lm` — a Llama-style decoder built from a ``LlamaConfig`` (or any local causal
  LM folder) seen through the trainer's protocol, saved as a standard checkpoint folder.
- :mod:`.hub_data` — corpora by Hugging Face ``datasets`` name, when the network allows.
- :mod:`.generate_cli` — ``attnlab generate``: text from a checkpoint folder.

Importing this package imports nothing from Hugging Face; each module does, when it is used.
"""
