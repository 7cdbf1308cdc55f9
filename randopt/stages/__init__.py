"""One module per workflow stage: what the stage reads, computes and writes, behind one ``run``
function. scripts/<stage>.py parses the CLI and calls it; rules/*.smk runs the script.

    freeze_gsm8k    randopt/data/gsm8k.py   write_frozen
    fetch_fineweb   randopt/data/heldout.py write_heldout
    prepare_model   prepare_model.py
    evaluate_shard  evaluate_shard.py
    rank            rank.py
    evaluate_members evaluate_members.py
    vote            vote.py
    score_bpb       score_bpb.py
    record          record.py
"""
