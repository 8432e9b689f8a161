"""The model adapter: real models reached through one place (loading, tokenizers, the architecture table)."""
