"""attnlab: the training dynamics of attention, made runnable, and the inference methods
that exploit the sparsity it predicts."""

__version__ = "0.1.0"


def apply(model, *methods, **kwargs):
    """Methods of any kinds on a Hugging Face causal LM, restored on exit (:func:`attnlab.methods.stack.apply`):

        with attnlab.apply(model, "int8", "h2o:budget=0.2"):
            out = model.generate(ids, max_new_tokens=32)
    """
    from attnlab.methods.stack import apply as _apply

    return _apply(model, *methods, **kwargs)
