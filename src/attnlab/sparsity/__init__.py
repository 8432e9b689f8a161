"""Contextual sparsity (Deja Vu, CATS, TEAL): which MLP neurons and heads matter per token, measured and exploited."""
