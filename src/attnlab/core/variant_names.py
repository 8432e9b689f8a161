"""The attention variants by name, without PyTorch: the command line offers them as choices before
anything heavy is loaded. What each one does, and the functions: :mod:`attnlab.core.attention`."""

VARIANTS = ("softmax", "softmax1", "sink-logit", "gated", "sink-token", "relu")
SOFTMAX_VARIANTS = VARIANTS[:5]  # those that normalise with a softmax (every row of probabilities sums to <= 1)
