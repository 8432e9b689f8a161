"""The attention variants by name, without PyTorch: the command line offers them as choices before
anything heavy is loaded. What each one does, and the functions: :mod:`attnlab.core.attention`."""

VARIANTS = ("softmax", "softmax1", "sink-logit", "gated", "sink-token")
