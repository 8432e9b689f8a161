"""Corpora: files, folders, data-folder names and hub datasets; the basic_english vocabulary."""
