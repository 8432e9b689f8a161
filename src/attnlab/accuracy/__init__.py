"""Downstream accuracy: zero-/few-shot tasks (COPA, PIQA, ARC, ...) through lm-evaluation-harness, with
the methods that alter a model applied while it answers (``attnlab eval``, ``attnlab reproduce accuracy-table``)."""
