"""What a finished run gives its user: a top-k member's weights as a model dir (export.py), and its ensemble
answering new questions (finished_run.py, the ask tool), both read back from the run's record."""
