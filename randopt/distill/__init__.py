"""Distillation (distill.enabled; docs/distill.md): one model out of the top-k ensemble.

data.py picks the train completions (the top-k members' correct ones, and the control's from the base
model's samples, sample.py), lora.py checks and configures the adapter, train.py fine-tunes it with
transformers' Trainer, merge.py writes the merged model dir and its manifest, summary.py gives the
record's comparison of the distilled model with the base, the ensemble and the control.
"""
