"""A finished run's base model, members and top-k ensembles as one lm-evaluation-harness model
("randopt"), so any lm-eval task can score them (docs/lm_eval.md)."""
