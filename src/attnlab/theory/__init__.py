"""The theory half: synthetic data, tiny models, population ODEs and theorem checks.

:mod:`.scansnap` and :mod:`.joma` hold one paper each; :mod:`.loop` is their one training loop.

Never imports transformers.
"""
