"""Methods as one concept: every KV policy, sparsity rule, RoPE scaling and weight scheme is a
:class:`~attnlab.methods.base.Method`, named in one registry (``METHODS``) and entered by one stack
(:func:`~attnlab.methods.stack.apply`) that restores the model."""
from attnlab.methods.base import KINDS, METHODS, Context, Method, describe, load, parse, parse_list, register
from attnlab.methods.stack import Applied, apply, ordered

__all__ = ["KINDS", "METHODS", "Applied", "Context", "Method", "apply", "describe", "load", "ordered", "parse",
           "parse_list", "register"]
