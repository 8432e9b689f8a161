"""Attention sinks from scratch: pre-training with attention variants and the StreamingLLM sink table."""
