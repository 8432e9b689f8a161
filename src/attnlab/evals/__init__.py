"""Evaluations as functions of a model: streaming NLL, sliding-window perplexity, passkey retrieval."""
