"""The numbers README.md, docs and bench READMEs quote from the real-model records, recomputed from the committed
files in bench/results and looked up in the text (issue 68 item 7: eleven such claims had drifted from their
records). Each check formats the record's own value as the text writes it; a changed record or an edited
sentence fails here."""
from __future__ import annotations

import json
import re

import pytest

from randopt.records.paired import detectable_gain, mcnemar_exact_p
from tests.conftest import REPO
from tests.support.bench_results import result_path, result_paths



def record(name: str) -> dict:
    return json.loads(result_path(name).read_text(encoding="utf-8"))


def text(path: str) -> str:
    """The file's text with every run of whitespace one space, so that a claim may wrap (in a YAML file, over
    comment lines)."""
    raw = (REPO / path).read_text(encoding="utf-8")
    if path.endswith(".yaml"):
        raw = re.sub(r"\n\s*#", "\n", raw)
    return re.sub(r"\s+", " ", raw)


def points(x: float, sign: bool = True) -> str:
    """A fraction as the docs write points: +6.1, −2.0 (a true minus sign)."""
    return f"{100 * x:{'+' if sign else ''}.1f}".replace("-", "−")


def interval(gain: dict) -> str:
    low, high = gain["ci95"]
    return f"[{points(low)}, {points(high)}]"


def discordant_from_p(gain: dict) -> tuple[int, int]:
    """(gained, lost) of a record written before per-problem vectors: the split whose exact p is the record's."""
    net = round(gain["gain"] * gain["n_test"])
    for total in range(abs(net), gain["n_test"] + 1, 2):
        gained = (total + net) // 2
        if mcnemar_exact_p(gained, total - gained) == pytest.approx(gain["p_value"], rel=1e-9):
            return gained, total - gained
    raise AssertionError(f"no discordant split gives p {gain['p_value']}")


H200 = record("real_model_qwen15b_h200_gsm8k_record.json")
H100 = record("real_model_qwen15b_h100_distill_record.json")
COUNTDOWN = record("real_model_qwen15b_h200_countdown_record.json")
HUMANEVAL = record("real_model_qwen15b_h200_humaneval_record.json")


def test_readme_numbers_of_the_real_model_come_from_one_record():
    """The README's table quotes one run (the H100 record with the controls), never the H200 record's gain beside
    the H100 record's control (the audit's first finding)."""
    readme = text("README.md")
    own = H100["statistics"]["ensemble_gain"]["0.1"]
    control = H100["statistics"]["random_vote"]["0.1"]
    assert f"one H100: top-10 % vote against the base's {100 * H100['accuracy']['base_test']:.1f} % | " \
           f"{points(own['gain'])} points {interval(own)}" in readme
    selection = control["selection_gain"]
    assert f"| {points(control['control_vs_base']['gain'])} {interval(control['control_vs_base'])}; " \
           f"{points(selection['gain'])} {interval(selection)}, exact p {selection['p_value']:.2f}" in readme
    assert "distilled from the vote" not in readme and "out of the top-k vote" not in readme   # the data are the
    # top-k members' correct train answers


def test_readme_embedded_default():
    default = record("cpu_default_epyc_zen4_record.json")
    gains = default["statistics"]["ensemble_gain"].values()
    assert len({(g["gain"], tuple(g["ci95"])) for g in gains}) == 1   # "both votes" alike
    gain = next(iter(gains))
    low, high = gain["ci95"]
    expected = (f"both votes lose {-100 * gain['gain']:.1f} points against the base's "
                f"{100 * default['accuracy']['base_test']:.1f} %, interval [{100 * low:.1f}, {100 * high:.1f}]")
    assert expected.replace("-", "−") in text("README.md")


def test_distillation_is_described_by_its_data_rule():
    rule = H100["distill"]["rounds"][0]["data_rule"]
    assert rule.startswith("per train problem, the correct completions of the top-k members")
    assert "out of the top-k vote" not in text("docs/distill.md")


def test_real_model_readme_members_and_stage_seconds():
    readme = text("bench/real_model/README.md")

    def below(rec):
        return sorted(rec["accuracy"]["base_test"] - m for m in rec["accuracy"]["member_mean_test"].values())
    means = sorted(H200["accuracy"]["member_mean_test"].values())
    assert f"on GSM8K ({points(means[0], False)}–{points(means[-1], False)} % against " \
           f"{points(H200['accuracy']['base_test'], False)} %)" in readme
    for name, rec in (("Countdown", COUNTDOWN), ("HumanEval", HUMANEVAL)):
        low, high = below(rec)[0], below(rec)[-1]
        assert f"{name} ({points(low, False)}–{points(high, False)} points)" in readme
    train = {name: {s: rec["accuracy"]["base_train"] - m["train_reward_mean"]
                    for s, m in rec["statistics"]["members_vs_base"].items()}
             for name, rec in (("Countdown", COUNTDOWN), ("HumanEval", HUMANEVAL))}
    assert f"at σ 5e-4 the members' mean train reward is {points(train['Countdown']['0.0005'], False)} (Countdown) " \
           f"and {points(train['HumanEval']['0.0005'], False)} (HumanEval) points below" in readme
    larger = [v for by_sigma in train.values() for s, v in by_sigma.items() if s != "0.0005"]
    assert f"at σ 1e-3 and 2e-3 {points(min(larger), False)} to {points(max(larger), False)} points" in readme
    seconds = round(H200["timings_s"]["evaluate_members"])
    assert f"| {seconds} s (cut and resumed) |" in readme
    assert readme.count(f"{seconds} s") >= 3 and "~190 s" not in readme
    assert f"{round(H100['timings_s']['evaluate_members_part'])} s of part-job time" in readme


def test_real_model_readme_base_against_its_neighbourhood():
    check = record("real_model_qwen15b_h100_basecheck.json")
    hood = check["neighbourhood_sigma_5e-4"]
    same_path = set(check["base_train_evaluate_shard_sigma_1e-7"].values())
    assert len(same_path) == 1 and same_path.pop() == hood["min"]   # the search-path base ties the minimum
    readme = text("bench/real_model/README.md")
    assert f"evaluate_members' base ({points(check['base_train_evaluate_members'], False)} %) sits below its whole " \
           f"σ 5e-4 neighbourhood (its minimum {points(hood['min'], False)} %)" in readme
    assert f"lowest of {hood['members'] + 1} draws at best" in readme


def test_real_model_readme_cap_table_reads_the_exact_test():
    caps = record("racing_qwen15b_512_h100_answer_tail.json")["vote"]["caps"]
    at = {cap: caps[cap]["run_lists"]["0.04"] for cap in ("256", "384")}
    for cap, row in at.items():
        assert row["difference_ci95"][1] < 0 and row["problems_disagreeing"] < 10   # the interval excludes 0
    assert at["384"]["p_value"] == pytest.approx(0.125)
    readme = text("bench/real_model/README.md")
    assert (f"on {at['256']['problems_disagreeing']} and {at['384']['problems_disagreeing']} disagreeing problems, "
            f"too few for a bootstrap interval to be a test: the exact p is {at['256']['p_value']:.2f} at 256 and "
            f"{at['384']['p_value']:.3f} at 384") in readme


def test_gsm8k_overlay_comments():
    config = text("config/qwen15b_gsm8k.yaml")
    drawn = {(m["seed"], m["sigma"]) for m in H100["statistics"]["random_vote"]["0.1"]["members"]}
    top25 = {(m["seed"], m["sigma"]) for t in H100["topk"] if t["fraction"] == 0.25 for m in t["members"]}
    assert f"{len(drawn - top25)} more members on test (the {len(drawn & top25)} the random list shares" in config
    assert "the paper's scales" not in config and "2.5–10× below the paper's 0.005" in config
    assert max(H100["population"]["sigmas"]) * 2.5 == pytest.approx(0.005)
    assert min(H100["population"]["sigmas"]) * 10 == pytest.approx(0.005)


def test_peers_readme_votes_against_their_bases():
    arms = record("peers_h100_qwen15b.json")["arms"]
    flash, ours = arms["flashopt"], arms["randopt_auto"]["record"]
    n = flash["config"]["test_samples"]
    flash_gain = round((flash["ensemble_test_accuracy"]["top3"] - flash["base_test_accuracy"]) * n)
    # the fewest discordant problems at which that net gain stops being significant
    first = next(total for total in range(flash_gain, n + 1, 2)
                 if mcnemar_exact_p((total + flash_gain) // 2, (total - flash_gain) // 2) > 0.05)
    ours_gain = ours["statistics"]["ensemble_gain"]["0.05"]
    readme = text("bench/peers/README.md")
    assert f"randopt's top-3 vote gains {points(ours_gain['gain'])} points over its base (exact p " \
           f"{ours_gain['p_value']:.2f}" in readme
    assert f"FlashOpt's gains {points(flash_gain / n)} points, {flash_gain} of {n} problems" in readme
    assert f"unless {first} or more of the {n} are discordant" in readme
    assert f"(randopt's 512-problem H100 record: {sum(discordant_from_p(H100['statistics']['ensemble_gain']['0.1']))})" \
        in readme


def test_report_md_controls_figures():
    report = text("docs/report.md")
    drawn = [m["sigma"] for m in H100["statistics"]["random_vote"]["0.1"]["members"]]
    top = [m["sigma"] for t in H100["topk"] if t["fraction"] == 0.1 for m in t["members"]]
    assert f"random-10 % list held {drawn.count(0.002)} of its {len(drawn)} members at σ 2e-3, the top-10 % list " \
           f"{top.count(0.002)})" in report
    selection = H100["statistics"]["random_vote"]["0.1"]["selection_gain"]
    total = sum(discordant_from_p(selection))
    assert f"With {total} discordant problems of {selection['n_test']} it is " \
           f"{100 * detectable_gain(selection['n_test'], total):.1f} points" in report


def test_the_fused_member_linear_numbers_come_from_the_h100_result():
    """bench/roofline/README.md's table and docs/member_batched_engine.md's sentence quote the H100's decode step of
    the 28 layers' projections at 8 rows a member (bench/results/roofline/roofline_h100_fused_linear.json)."""
    result = record("roofline_h100_fused_linear.json")
    assert result["checks_ok"] and len(result["checks"]) == 23
    step = {r["members"]: r for r in result["model_step"] if r["rows"] == 8}
    readme, design = text("bench/roofline/README.md"), text("docs/member_batched_engine.md")
    assert "All 23 bit checks passed" in readme
    for m in (1, 8, 16, 32):
        r = step[m]
        row = f"| {m} | {r['fused_ms']:.2f} | {r['signs_ms']:.2f} | {r['bmm_ms']:.2f} | {r['w0_ms']:.2f} |"
        assert row in readme, row
    ratios = [step[m]["bmm_ms"] / step[m]["signs_ms"] for m in (8, 16, 32)]
    assert f"{ratios[0]:.2f}× at M = 8 and {ratios[1]:.2f}× at M = 16 ({ratios[2]:.2f}× at 32)" in readme
    assert (f"{step[8]['signs_ms']:.1f} ms with packed signs against {step[8]['bmm_ms']:.1f} ms for the bmm of copies "
            f"at M = 8, {step[16]['signs_ms']:.1f} against {step[16]['bmm_ms']:.1f} at M = 16 ({ratios[1]:.2f}×), "
            f"{step[32]['signs_ms']:.1f} against {step[32]['bmm_ms']:.1f} at M = 32") in design
    assert f"({result['info']['fused_noise_draws_per_s_max'] / 1e12:.2f}·10¹² draws/s measured" in readme


def test_the_test_and_record_times_come_from_their_file():
    """bench/README.md's fast pass, CI and make record seconds, from the committed timings."""
    times = record("cpu_default_epyc_zen4_test_and_record_times.json")
    readme = text("bench/README.md")
    old, new = times["fast_pass"]
    assert f"{old['pytest_s']:.1f} s at {old['commit']} ({old['passed']:,} passed); **{new['pytest_s']:.1f} s at " \
           f"{new['commit']}** ({new['passed']:,} passed)" in readme
    base, loaded, quiet = times["ci"]
    assert f"at {loaded['commit']} {loaded['passed']:,} passed, pytest {loaded['pytest_s']:.1f} s, " \
           f"{loaded['wall_s'] // 60} min {loaded['wall_s'] % 60} s wall" in readme
    assert f"at {quiet['commit']}, quiet, {quiet['passed']:,} passed, pytest {quiet['pytest_s']:.1f} s, " \
           f"**{quiet['wall_s'] // 60} min {quiet['wall_s'] % 60} s** wall ({base['commit']}: {base['pytest_s']:.1f} s, " \
           f"{base['wall_s'] // 60} min {base['wall_s'] % 60} s, {quiet['passed'] - base['passed']} tests fewer)" in readme
    r = times["make_record"]
    assert f"{r['old']['commit']} against {r['new']['commit']}" in readme
    assert f"{r['old']['wall_s']:.1f} s against {r['new']['wall_s']:.1f} s ({r['new_over_old']:.2f}×)" in readme
