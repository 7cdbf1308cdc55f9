"""Engines: one small protocol (base.py), a torch/transformers implementation (the embedded default)
and a vLLM one for GPUs; factory.make_engine picks by config. perturb.py is the one switch between
members that both use, over the kernels of randopt/kernels/; memory.py what an engine needs of a card.
Nothing here imports randopt/runtime/, which runs engines for the stages (tests/test_import_names.py).

This package's __init__ imports nothing, so that a module needing one engine helper (compute_dtype,
base) does not pull every engine into its code key (randopt/code_keys.py).
"""
