"""The field's KV methods compared on RULER-style tasks while decoding: the tasks (generated here, no download)."""
