"""attnlab: the training dynamics of attention, made runnable, and the inference methods
that exploit the sparsity it predicts."""

__version__ = "0.1.0"
