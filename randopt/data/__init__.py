"""The pipeline's inputs: GSM8K-format problems (gsm8k.py; generated ones: synth.py) frozen into
train/test splits, and the held-out text slice for bits-per-byte (heldout.py). Each writes its files
with a manifest of sha256s under data/ (rules/data.smk)."""
