# results/record.json: the last finished run's record, copied in one atomic rename once its figures are drawn, so
# that it never mixes two runs and the folder it names holds that run's figures (randopt/result/last_run.py says
# why a copy, not a pointer). Another config's run, or this one's again, rewrites it: its input and run key change.
rule last_record:
    input:
        record=rules.record.output.record,
        figures=rules.figures.output.page,
    output:
        record=LAST_RECORD,
    log:
        f"logs/last_record/{PLAN.run_key}.log",
    params:
        run_key=PLAN.run_key,
    run:
        publish(input.record, output.record, log[0])
