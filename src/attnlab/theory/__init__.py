"""The theory half: synthetic data, tiny models, population ODEs and theorem checks.

Never imports transformers.
"""
