"""KV-cache policies (what to keep); the cache that applies them lives in attnlab.kv.cache."""
