"""One module per workflow stage: what the stage reads, computes and writes, behind one ``run``
function. scripts/<stage>.py parses the CLI and calls it; rules/*.smk runs the script. The Snakefile's
header maps every rule to its module (freeze_gsm8k, fetch_fineweb and export_member call
randopt/data/gsm8k.py, randopt/data/heldout.py and randopt/model/export.py directly).
"""
