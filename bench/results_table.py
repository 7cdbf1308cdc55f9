"""bench/RESULTS.md from the files in bench/results/: one row a file, with its headline figures, the
machine and the commit it was measured on.

    python bench/results_table.py            # rewrites bench/RESULTS.md
    python bench/results_table.py --check    # exit 1 when bench/RESULTS.md is not what the files give

Machine, commit and date come from each file's own fields ('machine', 'hardware', 'gpu', 'gpus',
'env.device', 'commit', 'created_utc', 'date'). METADATA below fills in, marked †, what a file does
not record. The figures are read by the first FIGURES entry whose keys the file has. A file that no
entry reads, or that METADATA does not know, still gets a row (its top-level numbers), so a new result
joins the table without a code change. A second table lists every run record's paired comparisons,
recomputed from its per-problem vectors, or says that it has none. tests/test_bench_results.py fails when
RESULTS.md is stale.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
from randopt.records.assemble import slots_from_cache  # noqa: E402  (the record's own rule, for older files too)
from randopt.records.comparisons import NO_VECTORS, cell, comparisons, has_vectors  # noqa: E402

# What a file does not record itself (or records only in part: a CPU without its model), from the
# notes of the session that measured it (the topic READMEs). Where it names a value, that value is
# shown, marked †, instead of the file's.
METADATA = {
    "cpu_default_epyc_zen4.json": {"date": "2026-11-30"},
    "cpu_default_epyc_zen4_avx2cap.json": {"date": "2026-11-30"},
    "cpu_default_epyc_zen4_record.json": {"machine": "AMD EPYC (Zen 4), 2 cores, avx512_bf16"},
    "racing_sim.json": {"machine": "shared 2-core AMD EPYC (a simulation: no model runs)", "date": "2026-11-30"},
    "resident_ab_epyc_zen4.json": {"machine": "AMD EPYC (Zen 4), 2 cores, avx512_bf16", "commit": "738a2a2",
                                   "date": "2026-12-01"},
    "distill_cpu_epyc_zen5.json": {"machine": "AMD EPYC (Zen 5), 2 cores, avx512_bf16, shared (load 3–15)"},
    "lm_eval_h200_engines_agree.json": {"machine": "1× NVIDIA H200, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
                                        "commit": "d30eaf1", "date": "2026-12-02"},
    "peers_h200_smollm2.json": {"commit": "d30eaf1"},
    # the lease of 2026-12-03 11:03-11:15, the device copy at 94f4c8f (its git metadata named 2055b58, dirty)
    "peers_h200_smollm2_mps.json": {"commit": "94f4c8f", "date": "2026-12-03"},
    # the same lease's first arm (15:13-15:36 UTC at c404c72): the arm file names the commit only inside its record
    "peers_h200_smollm2_samelease_cold_nomps_arm.json": {"commit": "c404c72"},
    # bench/peers/executor_modes.py at 5678942 (the script was new in that device copy)
    **{f"peers_executor_modes_h200_{m}.json": {"machine": "1× NVIDIA H200, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
                                               "commit": "5678942", "date": "2026-12-02"} for m in ("smollm2", "qwen7b")},   # the device copy's git metadata named 3de79fa (ran_at)
    # the second lease of 2026-12-02, at 51f9323 (files without their own commit field)
    **{f"peers_executor_modes_h200_{m}_rerun.json": {"machine": "1× NVIDIA H200, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
                                                     "commit": "51f9323", "date": "2026-12-02"} for m in ("smollm2", "qwen7b")},
    # the lease of 2026-12-02 15:05 at 617cc87 (bench/engines_per_gpu/options_h200.sh; the files name no commit)
    **{f"engines_per_gpu_h200_smollm2_{tag}.json": {"commit": "617cc87", "date": "2026-12-02"}
       for tag in ("none512", "spec512", "spec512_draft2", "worker512")},
    # the lease of 2026-12-02 19:25-20:45 at 1f6dd11 (options_h200.sh, MPS=1 for the mps files; no commit field)
    **{f"engines_per_gpu_h200_smollm2_{tag}.json": {"commit": "1f6dd11", "date": "2026-12-02"}
       for tag in ("none512_mpslease", "mps512", "mps512_n4")},
    # the lease of 2026-12-04 17:21-17:50 UTC at 417f471 (bench/real_model/h200_qwen15b.sh; the device copy's
    # git metadata named 92ae792, dirty, which the records carry)
    **{f"real_model_qwen15b_h200_{task}_record.json": {"commit": "417f471"} for task in ("gsm8k", "countdown", "humaneval")},
    "engines_per_gpu_h200_qwen15b_mps.json": {"commit": "417f471", "date": "2026-12-04"},
    "engines_per_gpu_h100_qwen15b_mps.json": {"commit": "5403e77", "date": "2026-12-06"},
    # the lease of 2026-12-06 09:06-09:35 UTC at 2e4f58b (bench/racing/racing_qwen15b_h200.sh callcost and
    # engines20 on an H100; the script names its files h200, renamed to the card they ran on)
    "engines_per_gpu_h100_qwen15b_mps20.json": {"commit": "2e4f58b", "date": "2026-12-06"},
    "vllm_h100_call_cost_qwen15b.json": {"commit": "2e4f58b", "date": "2026-12-06"},
    "real_model_qwen15b_h100_basecheck.json": {"machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04, vLLM 0.25.0",
                                               "commit": "5403e77", "date": "2026-12-06"},
    # the lease of 2026-12-06 11:21-11:46 UTC on an H100 at e13ace8 (clean): peers_h200.sh qwen15b-randopt (its arm
    # cold: vLLM's compile cache empty), qwen15b-flashopt, the randopt arm again warm, then 3 engines; the arm files
    # and batch_invariance.py's (racing_qwen15b_h200.sh batchinv) name no commit of their own
    "peers_h100_qwen15b_cold_auto_arm.json": {"commit": "e13ace8"},
    **{f"vllm_h100_batch_invariance_qwen15b_bi{m}.json": {"commit": "e13ace8", "date": "2026-12-06"} for m in (0, 1)},
    # the lease of 2026-12-06 19:58-20:04 UTC on an H100 at 7f4bf4a (clean): racing_qwen15b_h200.sh capcheck
    # (batch_invariance.py --cap 256; the script names it batch_invariance_qwen15b_h100_cap256_bi0.json)
    "vllm_h100_batch_invariance_qwen15b_cap256.json": {"commit": "7f4bf4a", "date": "2026-12-06"},
    # bench/real_model/answer_tail.py at ff68597 (its top-k lists are new there) on the 2-core session host, over the
    # train answers of the peers lease's randopt arm (its record: 2026-12-06 11:28 UTC, e13ace8, clean); the report
    # names neither machine
    "real_model_qwen15b_h100_answer_tail.json": {
        "machine": "answers: 1× NVIDIA H100 80GB HBM3, vLLM 0.25.0, at e13ace8; analysis: AMD EPYC (Zen 4), 2 cores",
        "commit": "ff68597", "date": "2026-12-06"},
    # the lease of 2026-12-06 14:00-14:18 UTC on an H100 at 8a998f6 (clean): vllm026_h200.sh members in both orders,
    # racing_qwen15b_h200.sh together3 (its first form: together, then one after another)
    **{f"engines_per_gpu_h100_qwen15b_{name}.json": {"commit": "8a998f6", "date": "2026-12-06"}
       for name in ("vllm025_first", "vllm025_second", "vllm026_first", "vllm026_second", "mps_sequential3",
                    "mps_together3")},
    "vllm_h100_qwen15b_026_vs_025.json": {"machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04 (host: 16-core Xeon)",
                                          "commit": "8a998f6", "date": "2026-12-06"},
    # the lease of 2026-12-06 17:04-17:11 UTC on an H100 at c54f398 (clean): racing_qwen15b_h200.sh cap, two of its
    # three runs (the lease's time ran out before the second 512), paired by bench/vllm/compare_versions.py --by max_tokens
    **{f"engines_per_gpu_h100_qwen15b_cap{t}.json": {"commit": "c54f398", "date": "2026-12-06"} for t in (256, 512)},
    "real_model_qwen15b_h100_cap256_vs_512.json": {"machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04, vLLM 0.25.0 "
                                                           "(host: 16-core Xeon)", "commit": "c54f398",
                                                "date": "2026-12-06"},
    # the embedded default (`make record`, max_tokens 32) and the same run at max_tokens 24, both at cd4498f on the
    # 2-core session host (torch engine, bf16); answer_tail.py --check-run at 7861a4a: the cap's estimate against the run
    "real_model_smollm2_cpu_epyc_zen4_answer_tail_cap24_check.json": {
        "machine": "AMD EPYC (Zen 4), 2 cores, avx512_bf16 (torch engine, bf16)", "commit": "7861a4a",
        "date": "2026-12-06"},
    # the lease of 2026-12-07 00:12-00:31 UTC on an H100 at 1b26620 (clean): racing_qwen15b_h200.sh at 512 train
    # problems and 16 seeds (the full arm's record names its commit; its racing arm failed twice at round 2, where
    # two engine jobs asked the MPS daemon at once: fixed in ad40193), then together3 as RACE_STARTS="together
    # together"; answer_tail.py (unchanged since 1b26620) on the full arm's answers on the 2-core session host
    "racing_qwen15b_512_h100_racing_search_log.txt": {
        "machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04, vLLM 0.25.0 (host: 16-core Xeon)",
        "note": "the racing arm's Snakemake log: rounds at 128/256/512 problems, failed in round 2 (MPS control collision)",
        "commit": "1b26620", "date": "2026-12-07"},
    **{f"engines_per_gpu_h100_qwen15b_mps_together3_{start}.json": {"commit": "1b26620", "date": "2026-12-07"}
       for start in ("cold", "warm")},
    "racing_qwen15b_512_h100_answer_tail.json": {
        "machine": "answers: 1× NVIDIA H100 80GB HBM3, vLLM 0.25.0, at 1b26620; analysis: AMD EPYC (Zen 3), 2 cores, avx2",
        "commit": "1b26620", "date": "2026-12-07"},
    # the lease of 2026-12-07 06:32-06:47 UTC on an H100 at 52509e1 (clean): racing_qwen15b_h200.sh at 512 train
    # problems and 16 seeds again, the workflow's engines starting together (the report and records name their
    # commit); bench/racing/job_times.py on the two arms' logs on the 2-core session host
    "racing_qwen15b_512_h100_together_jobs.json": {
        "machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
        "commit": "52509e1", "date": "2026-12-07"},
    # the lease of 2026-12-07 08:16-08:44 UTC on an H100 at d2134fe (clean): peers_h200.sh qwen15b-randopt (auto's 3
    # engines, vLLM's compile cache cold), qwen15b-flashopt, then qwen15b-engines with PEERS_N 1, 3, 2 and 1 again (the
    # report holds the second 1-engine arm; the first is its own file, which names no commit); job_times.py on the
    # five randopt arms' logs on the 2-core session host
    "peers_h100_qwen15b_together_first_1_arm.json": {"commit": "d2134fe"},
    "peers_h100_qwen15b_together_jobs.json": {
        "machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
        "commit": "d2134fe", "date": "2026-12-07"},
    # the lease of 2026-12-07 10:31-10:57 UTC on an H100, working tree at 50df058 (the device copy's .git said 9f783dc,
    # so the records call it dirty): h200_qwen15b.sh gsm8k on bench/real_model/enginecheck.yaml, auto (3 engines)
    # then one engine, each cold then warm; racing_qwen15b_h200.sh kvsame (a fixed 12 GiB KV cache for 1, 3, 1
    # engines, then 2 and 4, on a compile cache of its own); job_times.py on the arms' logs on the session host
    **{f"engines_per_gpu_h100_qwen15b_kv12_{run}.json": {"commit": "50df058", "date": "2026-12-07"}
       for run in ("n1_cold", "n3_after_n1", "n1_warm", "n2_cold", "n4_after_n2")},
    **{f"engines_per_gpu_h100_qwen15b_workflow_{what}.json": {
        "machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
        "commit": "50df058", "date": "2026-12-07"} for what in ("jobs", "auto_record", "one_record")},
    # the lease of 2026-12-07 15:13-15:41 UTC on an H100 at 399f539 (clean): h200_qwen15b.sh gsm8k on enginecheck.yaml,
    # auto and one engine, cold then warm twice; the engines bench NS="1 2 3"; job_times.py on the session host
    "engines_per_gpu_h100_qwen15b_mps_rerun.json": {"commit": "399f539", "date": "2026-12-07"},
    "engines_per_gpu_h100_qwen15b_workflow_rerun_jobs.json": {
        "machine": "1× NVIDIA H100 80GB HBM3, driver 580.159.04, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
        "commit": "399f539", "date": "2026-12-07"},
    "engines_per_gpu_member_batch_h200_smollm2_vllm_baseline.json": {
        "machine": "1× NVIDIA H200, vLLM 0.25.0 (host: 16-core Xeon with AMX)", "commit": "617cc87",
        "date": "2026-12-02"},
    "speculation_h200_qwen7b.json": {"machine": "1× NVIDIA H200, vLLM 0.25.0 (host: 16-core Xeon with AMX)",
                                     "commit": "51f9323", "date": "2026-12-02"},
    "standard_h200_shape7b.json": {"commit": "51f9323", "date": "2026-12-02"},
    "vllm_h200_bench.json": {"date": "2026-11-29"},
    "vllm_h200_bench_separate_core.json": {"date": "2026-11-29"},
    "vllm_h200_verify.json": {"date": "2026-11-29"},
    "vllm_h200_startup.json": {"machine": "1× NVIDIA H200", "date": "2026-11-29"},
    "vllm_h200_call_cost_qwen7b.json": {"date": "2026-12-01"},
    "vllm_h200_call_cost_smollm2.json": {"date": "2026-12-01"},
    "vllm_h200_call_cost_smollm2_to512.json": {"date": "2026-12-01"},
    "vllm_h200_contract.txt": {"machine": "1× NVIDIA H200", "date": "2026-11-29"},
    "perturb_h200.json": {"commit": "44d706c", "date": "2026-12-02"},
    "perturb_h200_log.txt": {"machine": "1× NVIDIA H200", "note": "the console log of perturb_h200.json's run",
                             "commit": "44d706c", "date": "2026-12-02"},
    "tensor_parallel_h200x2_dp.json": {"machine": "2× NVIDIA H200", "date": "2026-11-30"},
    "tensor_parallel_h200x2_pad.json": {"machine": "2× NVIDIA H200", "date": "2026-11-30"},
    "tensor_parallel_h200x2_tp2_vs_tp1_padded.json": {"machine": "2× NVIDIA H200", "date": "2026-11-30"},
    **{f"tensor_parallel_h200x2_{name}.json": {"date": "2026-11-30"}
       for name in ("tp1_padded", "tp2_padded", "tp1_smollm2_vs_padded")},
    # the 7B-shaped benchmark on the pair: the JSON names one GPU's model, not how many there were
    **{f"tensor_parallel_h200x2_vllm_bench_tp{tp}.json": {"machine": "2× NVIDIA H200", "date": "2026-11-30"}
       for tp in (1, 2)},
    # the lease of 2026-12-07 22:59-23:00 UTC (an H100 where an H200 was asked for; host an Intel Xeon), main at 61e82b8
    "roofline_h100_fused_linear.json": {"machine": "1× NVIDIA H100 80GB HBM3 (host: Intel Xeon)", "commit": "61e82b8",
                                        "date": "2026-12-07"},
    "roofline_h100_fused_linear_log.txt": {"machine": "1× NVIDIA H100 80GB HBM3 (host: Intel Xeon)", "commit": "61e82b8",
                                           "date": "2026-12-07"},
}
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _machine(data: dict) -> str | None:
    """The machine as the file records it: GPUs, then the host's CPU model, cores and bf16 flags."""
    for key in ("machine", "hardware"):
        if isinstance(data.get(key), str):
            return data[key]
    host = data.get("machine") if isinstance(data.get("machine"), dict) else data.get("hardware")
    cpu = data.get("cpu") if isinstance(data.get("cpu"), dict) else {}
    gpus = list((host or {}).get("gpus") or data.get("gpus") or [])
    gpu = data.get("gpu") or (host or {}).get("gpu") or (data.get("env") or {}).get("device")
    if not gpus and gpu:
        gpus = [gpu]
    if not host:
        return f"{len(gpus)}× {gpus[0]}" if gpus else None
    if isinstance(host.get("cpu"), dict):
        model, flags = host["cpu"].get("model"), host.get("cpu_flags") or host["cpu"].get("flags")
    else:
        model, flags = host.get("cpu") if host.get("cpu") != "x86_64" else None, host.get("cpu_flags")
    model, flags = model or host.get("cpu_model") or cpu.get("model"), flags or cpu.get("flags") or []
    count = host.get("cpu_count") or host.get("cpu_cores")
    cores = [f"{count} cores"] if count else []
    shown = [f for f in BF16_FLAGS if f in flags] or (["avx2 only"] if "avx2" in flags else [])
    if cpu.get("aten_capability") == "AVX2" and "avx512f" in flags:
        shown.append("capped to AVX2")
    text = ", ".join([model or "CPU model not recorded", *cores, *shown])
    return f"{len(gpus)}× {gpus[0]} (host: {text})" if gpus else text


def _commit(data: dict) -> str | None:
    commit = data.get("commit")
    sha, dirty = (commit.get("sha"), commit.get("dirty")) if isinstance(commit, dict) else \
        (commit, data.get("commit_dirty"))
    return f"{sha[:7]}{' (dirty)' if dirty else ''}" if isinstance(sha, str) else None


def _shares(pairs: dict, what: str, digits: int = 3) -> str:
    return f"{what} " + ", ".join(f"{k}: {v:.{digits}f}" for k, v in pairs.items())


def _record(d):
    acc, gain = d["accuracy"], (d.get("statistics") or {}).get("ensemble_gain") or {}
    if "not_a_result" in acc:   # a shape model's record (random weights): its times only, never its accuracy
        t = d["throughput"]
        return [acc["not_a_result"], f"{_rate(d)} ({t['seeds_per_s_loop']:.3g} in the loop)",
                f"{t['gen_tokens_per_s'] / 1000:.1f}k tok/s", f"switch {t['switch_ms_per_seed']:.1f} ms"]
    return [f"base test {acc['base_test']:.3f}", _shares(acc["ensemble_test"], "vote test at top"),
            *(f"gain at {f}: {g['gain']:+.3f} [{g['ci95'][0]:+.3f}, {g['ci95'][1]:+.3f}], p {g['p_value']:.2g}"
              for f, g in gain.items()),
            *(f"random {f} vote {c['control_test']:.3f}: selection gain {c['selection_gain']['gain']:+.3f} "
              f"[{c['selection_gain']['ci95'][0]:+.3f}, {c['selection_gain']['ci95'][1]:+.3f}]"
              for f, c in ((d.get("statistics") or {}).get("random_vote") or {}).items()),
            _rate(d), f"bpb base {d['bpb']['base']:.4f}"]


def _distilled(record: dict) -> list[str]:
    """Each distillation round's test accuracies and the distilled model against its control."""
    out = []
    for r in record["distill"]["rounds"]:
        acc, vs = r["test_accuracy"], r["intervals"]["distilled_vs_control"]
        out.append(f"round {r['round']}: distilled {acc['distilled']:.3f}, control {acc['control']:.3f}, ensemble "
                   f"{acc['ensemble']:.3f}; distilled − control {vs['gain']:+.3f} [{vs['ci95'][0]:+.3f}, {vs['ci95'][1]:+.3f}]")
    return out


def _rate(record: dict) -> str:
    """The search's seeds/s, or none where its jobs read answers from the answer cache (randopt/records/assemble.py
    search_rate; a record written before that rule still has the rate of no search, so it is judged here too)."""
    t, asked = record["throughput"], (record.get("selection") or {}).get("slots_evaluated")
    if t["seeds_per_s"] is None or slots_from_cache(t.get("train_slots_evaluated_this_run", asked), asked):
        return "seeds/s: none (the search came from the answer cache)"
    return f"{t['seeds_per_s']:.3g} seeds/s"


def _engines(d):
    """A bench/engines_per_gpu/engines_per_gpu.py sweep: members/s by engines on the GPU, with its engine options."""
    rounds = [r for r in d["rounds"] if "members_per_s" in r]
    one = next((r["members_per_s"] for r in rounds if r["n_engines"] == 1), None)
    options = ", ".join(f"{k} {v}" for k, v in d["protocol"]["engine_options"].items()) or "no engine option"
    return [f"{d['protocol']['model']}, max_tokens {d['protocol']['max_tokens']}, {options}"
            + (", under CUDA MPS" if d["protocol"].get("cuda_mps") else ""),
            *(f"N={r['n_engines']} {r['members_per_s']:.3g} members/s"
              + (f" ({r['members_per_s'] / one:.2f}×)" if one else "") + f", GPU {r['gpu_util_mean_pct']:.0f} %"
              for r in rounds)]


def _racing(d):
    arms, ratio = d["arms"], d["ratios_racing_over_full"]
    share = (d.get("answer_agreement") or {}).get("share_completions_differing")
    return [f"seeds/s full {arms['full']['seeds_per_s']:.4g}, racing {arms['racing']['seeds_per_s']:.4g}: "
            f"**{ratio['seeds_per_s']:.2f}×**", f"{ratio['slots_full_over_racing']:.2f}× fewer train slots",
            _shares({f: r["recall"] for f, r in d["recall"].items()}, "recall at top"),
            *([f"{100 * share:.1f} % of completions differ"] if share is not None else [])]


def _peers(d):
    """A bench/peers/peers.py report: each arm's wall time and members/s, FlashOpt's wall over randopt's."""
    arms = [f"{tag} {a['wall_s']:.0f} s, {a['members_per_s']:.3g} members/s" if a.get("ok") else f"{tag} failed"
            for tag, a in d["arms"].items()]
    walls = [f"FlashOpt's wall / {tag}'s: **{r['wall_flashopt_over_randopt']:.2f}×**"
             + (f" (search once an engine is up: {r['search_after_first_engine_flashopt_over_randopt']:.2f}×)"
                if r.get("search_after_first_engine_flashopt_over_randopt") else "") for tag, r in d["ratios"].items()]
    return [*arms, *walls, f"target ≥ {d['target']['wall_flashopt_over_randopt_at_least']}×"]


def _modes(d):
    """A bench/peers/executor_modes.py result: seconds per member and generated tokens/s by vLLM's process layout."""
    return [f"{mode} {r['s_per_member']:.3f} s/member ({r['gen_tokens_per_s'] / 1000:.1f}k tok/s)" if "error" not in r
            else f"{mode}: {r['error']}" for mode, r in d["modes"].items()]


def _tp(d):
    """A bench/tensor_parallel/vllm_tp.py result: reference, check, or a reference against another model."""
    out = [f"TP {d['tp']}"] if "tp" in d else []
    weights = d.get("weights") or {}
    if weights:
        equal, exact = weights["all_bit_equal"], weights["restore_equals_checkpoint"]
        out.append(f"weights {'' if equal else 'NOT '}bit-equal ({weights['tensors']} tensors, "
                   f"{len(weights['cases'])} seeds), restore {'' if exact else 'NOT '}exact")
    for run, checks in (d.get("runs") or {}).items():
        if "teacher_forced_on_tp1" in checks:
            out.append(f"{run}: teacher-forced argmax = TP 1's at "
                       f"{100 * checks['teacher_forced_on_tp1']['argmax_agreement']:.1f} %")
    against = d.get("against") or {}
    if against:
        out.append(f"fed the other model's completions: argmax agreement "
                   f"{100 * against['teacher_forced_on_other']['argmax_agreement']:.1f} %, free-running identical "
                   f"{against['free_running_vs_other']['identical']}")
    bpb = d.get("bpb") or {}
    if "bpb" in bpb:
        out.append(f"bpb {bpb['bpb']:.5f}" + (f" (TP 1 {bpb['bpb_tp1']:.5f})" if "bpb_tp1" in bpb else ""))
    return out + ([f"{d['parameters'] / 1e9:.2f} B parameters"] if "parameters" in d else [])


def _verify(d):
    out = []
    for name in ("tiny_qwen2_untied", "smollm2_135m"):
        cases = [c for c in d[name]["weights"].values() if isinstance(c, dict)]
        out.append(f"{name}: weights {sum(c['bit_equal'] for c in cases)}/{sum(c['tensors'] for c in cases)} "
                   "tensors bit-equal")
    smol = d["smollm2_135m"]
    agreement = smol["teacher_forcing"]["argmax_agreement"]
    return out + [f"teacher-forced argmax = torch engine's at {100 * agreement:.2f} %",
                  f"bpb vLLM {smol['bpb']['bpb_vllm']:.5f} vs torch {smol['bpb']['bpb_torch']:.5f}"]


def _perturb(d):
    ms = {t["method"]: t["ms_per_seed"] for t in d["timing"]}
    gaussian = ([f"Gaussian {ms['reconstruct, Gaussian: SwitchPlan (CUDA graph)']} ms "
                 f"({d['gaussian_over_floor']:.2f}× the floor, {d['gaussian_over_rademacher']:.2f}× Rademacher)"]
                if "gaussian_over_floor" in d else [])
    return [f"reconstruct {ms['reconstruct: SwitchPlan (CUDA graph)']} ms vs copy floor "
            f"{ms['copy base->live (floor)']} ms (**{d['reconstruct_over_floor']:.2f}×**)", *gaussian,
            f"upstream-style switch {ms['upstream-style (randn add, regen subtract)']} ms",
            f"{sum(d['correctness'].values())}/{len(d['correctness'])} bit-exactness checks pass"]


def _perturb_cpu(d):
    ms = {r["method"]: r["ms_per_seed"] for r in d["rows"]}
    ratios = d["ratios"]
    return [f"SmolLM2-135M-shaped bf16 switch: Gaussian {ms['reconstruct, Gaussian (CPU kernel, numba)']} ms, "
            f"Rademacher {ms['reconstruct, Rademacher (CPU kernel, numba)']} ms, copy floor "
            f"{ms['copy base->live (floor)']} ms (medians)",
            f"**Gaussian {ratios['gaussian_over_rademacher']:.2f}× Rademacher**, {ratios['gaussian_over_floor']:.1f}× "
            f"the floor (Rademacher {ratios['rademacher_over_floor']:.1f}×)",
            f"table vs exact normal at sigma 1e-2: {100 * d['resolution']['sigma_0.01']['share_of_weights_changed']:.2f} % "
            "of bf16 weights differ"]


# (the top-level keys it reads, its headline figures): the first entry whose keys a file has all of
# reads it; one that then fails on the file's inner shape leaves it to the fallback (its numbers).
def _fused_linear(d: dict) -> list[str]:
    """bench/roofline/fused_linear_bench.py: the checks, and a decode step of the 28 layers' projections at M."""
    step = {(r["members"], r["rows"]): r for r in d["model_step"]}
    rows = [f"bits: {'all ' + str(len(d['checks'])) + ' checks pass' if d['checks_ok'] else 'A CHECK FAILED'}"]
    for m in (8, 16, 32):
        if (m, 8) in step:
            r = step[(m, 8)]
            rows.append(f"M={m}, 8 rows: hashed {r['fused_ms']:.1f} ms, packed signs {r['signs_ms']:.1f}, bmm of copies "
                        f"{r['bmm_ms']:.1f}, W0 alone {r['w0_ms']:.2f} (signs/bmm **{r['signs_over_bmm']:.2f}**)")
    return rows + [f"noise draws/s {d['info']['fused_noise_draws_per_s_max']:.3g}"]


FIGURES = [
    (("model_step", "ragged", "checks_ok"), _fused_linear),
    (("ratios", "arms", "protocol", "target"), _peers),
    (("modes", "protocol", "model_dir"), _modes),
    (("batch_invariant", "summary", "protocol"), lambda d: [   # bench/vllm/batch_invariance.py
        f"VLLM_BATCH_INVARIANT {int(d['batch_invariant'])}: {d['protocol']['members']} members x "
        f"{d['protocol']['problems']} problems in 1 call against {d['protocol']['calls']}: "
        f"{d['summary']['whole_vs_split']['share_completions_differing']:.1%} of answers differ "
        f"({d['summary']['whole_vs_split']['share_correct_differing']:.1%} in correctness); the same call twice: "
        f"{d['summary']['whole_vs_again']['share_completions_differing']:.1%}",
        f"a whole call {d['summary']['whole_generate_s_median']:.2f} s (median)",
        *([f"at max_tokens {d['protocol']['cap']} against the {d['protocol']['max_tokens']}-token answers cut there: "
           f"**{d['summary']['whole_cut_vs_capped']['share_completions_differing']:.1%} differ**, a call "
           f"{d['summary']['capped_generate_s_median']:.2f} s"] if d["protocol"].get("cap") else [])]),
    (("rounds", "starts", "memory_plan", "protocol"), _engines),
    (("ratios_racing_over_full", "arms", "recall"), _racing),
    (("ratios_racing_over_full", "arms", "cut"), lambda d: [   # a racing bench cut before its report
        f"search call: racing **{d['ratios_racing_over_full']['seeds_per_s_call']:.2f}×** full",
        f"generation {d['ratios_racing_over_full']['generation_speed_estimate']:.2f}×, "
        f"{d['ratios_racing_over_full']['slots_full_over_racing']:.2f}× fewer train slots (no report: cut)"]),
    (("accuracy", "throughput", "bpb", "distill"), lambda d: _record(d) + _distilled(d)),
    (("accuracy", "throughput", "bpb"), _record),
    (("base_train_evaluate_members", "neighbourhood_sigma_5e-4"), lambda d: [   # bench/real_model/basecheck_compare.py
        f"base on train: evaluate_members {d['base_train_evaluate_members']:.3f}, the search's evaluate_shard "
        + ", ".join(f"{v:.3f}" for v in d["base_train_evaluate_shard_sigma_1e-7"].values()),
        f"sigma 5e-4 members {d['neighbourhood_sigma_5e-4']['mean']:.3f} mean, min {d['neighbourhood_sigma_5e-4']['min']:.3f}",
        "members re-answered identically: " + ", ".join(f"{v:.0%}" for v in d["members_completions_identical_to_the_run"].values())]),
    (("runs", "prompts", "max_tokens", "sigma", "one_at_a_time"), lambda d: [   # bench/engines_per_gpu/member_batch.py
        f"{d['prompts']} prompts x {d['max_tokens']} tokens, {d['compute_dtype']}, {d.get('decode', 'eager')} decode: "
        + ", ".join(f"M={r['members']} {r['members_per_s']:.3g} members/s ({r['members_per_s_over_one_at_a_time']:.2f}×"
                    + (f", **{r['members_per_s_over_vllm']:.2f}× one vLLM engine**" if "members_per_s_over_vllm" in r
                       else "") + ")" for r in d["runs"] if "members_per_s" in r),
        f"one at a time (the baseline): {d['one_at_a_time']['members_per_s']:.3g} members/s"]),
    (("extrapolated", "search", "engine_start_s"), lambda d: [   # bench/standard/shape_summary.py
        f"extrapolated to {d['extrapolated']['to']['members']} members: **{d['extrapolated']['total_h']:.2f} h**",
        f"a member {d['search']['member_s']:.2f} s ({d['search']['gen_tokens_per_s'] / 1000:.1f}k tok/s)",
        f"engine start {d['engine_start_s']:.0f} s", f"switch {d['search']['switch_ms_per_seed']:.1f} ms"]),
    (("orders", "calls_over_other", "verdict"), lambda d: [   # bench/vllm/compare_versions.py
        *(f"{o['second'][d['compared_by']]} after {o['first'][d['compared_by']]}: calls "
          f"{o['second_over_first_median']:.3f}× over {o['seeds']} seeds, right answers "
          + " / ".join(f"{k}: {v}" for k, v in o["correct"].items()) for o in d["orders"]),
        d["verdict"]]),
    (("arms",), lambda d: [   # bench/speculation/speculation.py compare
        f"{a['tag']}: {a['members_per_s']:.3g} members/s ({a['speedup']:.2f}×), identical {a['identical_share']:.3f}"
        for a in d["arms"]] if isinstance(d["arms"], list) else None),
    (("added_s", "added_s_by_stage", "jobs_finished"), lambda d: [
        f"distill.enabled adds **{d['added_s'] / 60:.1f} min** ({d['jobs_finished']} jobs)",
        *([f"wall {d['wall_without_distill_s']:.0f} → {d['wall_s']:.0f} s (+{d['wall_added_s'] / 60:.1f} min)"]
          if "wall_added_s" in d else []),
        _shares(d["added_s_by_stage"], "seconds:", 0),
        *([_shares(d["test_accuracy"], "test accuracy")] if "test_accuracy" in d else [])]),
    (("s_per_seed", "engine_over_floor", "floor_s_per_seed", "auto_dtype"), lambda d: [
        f"{t}: {s:.2f} s a seed, plain generate {d['floor_s_per_seed'][t]:.2f} s ({d['engine_over_floor'][t]:.2f}×)"
        for t, s in d["s_per_seed"].items()] + [f"auto picks {d['auto_dtype']}"]),
    (("gen_tokens_per_s", "switch_ms_mean", "seeds_per_s", "loop_overhead"), lambda d: [
        *([f"TP {d['tensor_parallel_size']}"] if "tensor_parallel_size" in d else []),
        f"**{d['gen_tokens_per_s']:,.0f} generated tokens/s**", f"{d['seeds_per_s']:.3f} seeds/s",
        f"switch {d['switch_ms_mean']:.1f} ms", f"seed-loop overhead {100 * d['loop_overhead']:.2f} %"]),
    (("curves",), lambda d: [
        _shares({m: c["call_s_median"] for m, c in curve.items()}, f"{name}: seconds a call at m problems")
        for name, curve in d["curves"].items()]),
    (("smollm2_135m", "tiny_qwen2_untied"), _verify),
    (("groups", "jobs"), lambda d: [   # bench/racing/job_times.py
        f"{g['run']}{'' if g['round'] is None else ' round ' + str(g['round'])}: {g['members']} members x "
        f"{'/'.join(map(str, g['problems']))} problems in {g['jobs']} jobs, {g['first_start_to_last_end_s']:.0f} s "
        f"(engines up at {'/'.join(f'{s:.0f}' for s in g['engines_ready_s'])} s); a member's call **{g['call_s']:.2f} s**"
        for g in d["groups"]]),
    (("caps", "member_calls", "n_tokens"), lambda d: [   # bench/real_model/answer_tail.py
        f"{d['answers']} answers, accuracy {d['accuracy']:.3f}, tokens median {d['n_tokens']['median']:.0f}, "
        f"max {d['n_tokens']['max']}",
        *(f"cap {cap}: cut {c['cut']:.1%}, accuracy {c['accuracy']:.3f}, decode steps "
          f"**{c['decode_steps_ratio']:.2f}×**, Spearman "
          + ("none" if c["rank_correlation"] is None else f"{c['rank_correlation']:.2f}")
          + (", top-k kept " + ", ".join(f"{t['kept']}/{t['k']}" for t in c["topk"]) if c.get("topk") else "")
          for cap, c in d["caps"].items()),
        *([f"against a run at {d['check']['cap']}: train answers "
           f"**{1 - d['check']['train']['share_completions_differing']:.1%} the same**, "
           f"{d['check']['train']['share_correct_differing']:.1%} scored otherwise, lists kept "
           + ", ".join(f"{n}/{t['k']}" for n, t in zip(d["check"]["lists_kept"].values(),
                                                        d["caps"][str(d["check"]["cap"])]["topk"]))
           + "".join(f"; vote {key}: {v['estimated']:.3f} estimated, {v['run']:.3f} run"
                     for key, v in d["vote"]["caps"][str(d["check"]["cap"])]["check"]["votes"].items()
                     if v["estimated"] is not None)]
          if d.get("check") else [])]),
    (("engine_in_process", "engine_core_process", "import_s"), lambda d: [
        f"engine start {d['engine_in_process']['total_s']:.1f} s in-process, "
        f"{d['engine_core_process']['total_s']:.1f} s with a separate core",
        f"import vllm {min(d['import_s']):.1f}–{max(d['import_s']):.1f} s"]),
    (("reconstruct_over_floor", "timing", "correctness"), _perturb),
    (("ratios", "rows", "resolution"), _perturb_cpu),
    (("export_s", "params", "files", "GB_per_s_read_plus_write", "tensors_checked_bit_equal"), lambda d: [
        f"{d['params'] / 1e9:.2f} B parameters in {d['files']} files exported in **{d['export_s']:.1f} s**",
        f"{d['GB_per_s_read_plus_write']:.2f} GB/s read + write",
        f"{d['tensors_checked_bit_equal']} tensors bit-equal"]),
    (("speedup_seeds_per_s", "one_gpu", "two_gpus"), lambda d: [
        f"evaluate_shard {d['one_gpu']['seeds_per_s']:.2f} seeds/s on 1 GPU, {d['two_gpus']['seeds_per_s']:.2f} "
        f"on 2: **{d['speedup_seeds_per_s']:.2f}×**"]),
    (("padding", "verify"), lambda d: [
        "heads {}→{}, kv heads {}→{}".format(*d["padding"]["heads"], *d["padding"]["kv_heads"]),
        *(f"{t}: max |Δ logit| {v['max_abs_logit_diff']:.1e}, argmax agreement {v['argmax_agreement']:.3f}, "
          f"greedy identical {v['greedy_identical']}" for t, v in d["verify"].items() if isinstance(v, dict))]),
    (("mode",), _tp),
    (("issue", "script"), lambda d: [
        f"{model} at " + ", ".join(_tp(part)) for model, parts in d.items() if isinstance(parts, dict)
        for part in parts.values() if isinstance(part, dict) and part.get("mode") == "check"]),
    (("metrics", "same_model_sha256"), lambda d: [
        f"{key} B − A {m['b_minus_a']:+.4f}" for key, m in d["metrics"].items()
        if key.startswith(("accuracy.base_test", "accuracy.ensemble_test", "bpb.base"))]),
    (("scenarios",), lambda d: [
        f"{name}: default rule {s['default_config']['speedup_mean']:.2f}× at recall "
        f"{s['default_config']['recall_mean']:.3f}" for name, s in d["scenarios"].items()]),
    (("a", "b", "models", "known_agreement"), lambda d: [
        f"{name} {task}: " + (f"texts identical {t['identical']}/{t['docs']}, answers equal {t['answers_equal']}/{t['docs']}"
                              if "identical" in t else
                              f"chosen answer equal {t['chosen_answer_equal']}/{t['docs']}, max |Δ loglik| "
                              f"{t['max_abs_diff']:.3f}")
        for name, m in d["models"].items() for task, t in m["tasks"].items()]),
    (("search", "test_accuracy_so_far", "prepare_model_s"), lambda d: [   # a lease cut inside evaluate_members
        f"prepare_model {d['prepare_model_s']:.0f} s",
        f"search of {d['search']['members']} members x {d['search']['train_problems']} problems "
        f"**{d['search']['wall_s_first_job_start_to_last_shard_end']:.0f} s**",
        f"base test {d['test_accuracy_so_far']['base']:.3f}, {d['test_accuracy_so_far']['members_evaluated']} "
        f"members {d['test_accuracy_so_far']['members_min']:.3f}–{d['test_accuracy_so_far']['members_max']:.3f} "
        "before the cut"]),
    (("result",), lambda d: [
        f"{way}: {r['ms_per_token']:.2f} ms a generated token" for way, r in d["result"].items()]),
]


def result_files(results: Path) -> list[Path]:
    """Every result file, in its topic's folder (results/<topic>/<file>) or, not yet filed, at the top; by name."""
    return sorted((p for p in [*results.iterdir(), *results.glob("*/*")] if p.is_file()), key=lambda p: p.name)


def results_table(results: Path = BENCH / "results") -> str:
    """The text of bench/RESULTS.md for the files in results."""
    topics = sorted((p.name for p in results.parent.iterdir() if p.is_dir() and p != results
                     and not p.name.startswith(("_", "."))), key=len, reverse=True)
    rows = []
    for path in result_files(results):
        meta = METADATA.get(path.name, {})
        data = json.loads(path.read_text(encoding="utf-8")) if path.suffix == ".json" else {}
        read = next((read for keys, read in FIGURES if all(k in data for k in keys)), None)
        try:
            figures = read(data) if read else None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            figures = None
        if path.suffix != ".json":
            summary = re.findall(r"=+ (\d+ passed.*?) =+\s*$", path.read_text(encoding="utf-8"), re.M)
            figures = summary[-1:] or [meta.get("note", "a log: see the file")]
        elif figures is None:  # no FIGURES entry reads it: its top-level numbers
            figures = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in data.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)][:6] or ["see the file"]
        found = {"machine": _machine(data), "commit": _commit(data),
                 "date": str(data.get("created_utc") or data.get("date") or "")[:10] or None}
        cells = [f"{meta[k]} †" if k in meta else found[k] or "not recorded" for k in ("machine", "commit", "date")]
        topic = path.parent.name if path.parent != results else \
            next((t for t in topics if path.name.startswith(t + "_") or path.stem == t), None)
        link = f"[{topic}]({topic}/README.md)" if topic and (results.parent / topic / "README.md").is_file() \
            else topic or "—"
        rows.append((topic or "~", path.name, [link, f"[{path.name}](results/{path.relative_to(results).as_posix()})",
                                               *cells, "; ".join(figures)]))
    lines = ["# Every measured figure", "",
             "Written by `python bench/results_table.py` from the files in [results/](results/), not by hand;",
             "`tests/test_bench_results.py` fails when this page is stale. Machine, commit and date are each",
             "file's own; † marks what the script's METADATA adds where a file does not record it. What the",
             "numbers mean, and the command that measured them: each topic's README.", "",
             "| topic | file | machine | commit | date | headline figures |", "| --- | --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for _, _, cells in sorted(rows)]
    return "\n".join(lines + records_section(results)) + "\n"


def records_section(results: Path) -> list[str]:
    """The second table: every run record's paired comparisons, recomputed from its per-problem vectors
    (randopt/records/comparisons.py), or a line saying the record has none."""
    lines = ["", "## Run records: every comparison, recomputed from the record's per-problem vectors", "",
             "Each cell: problems only the first side gets right / only the second, the gain [95 % paired bootstrap]",
             "(* where fewer than 10 problems are discordant: the interval is then no test), McNemar's exact p (the",
             "primary test), Holm's p over the record's top-k fractions, and the smallest gain the design detects with",
             "80 % power (docs/report.md says how). Recomputed here from `per_problem`, not copied from `statistics`.",
             "", "| file | test problems | comparison | per top-k fraction |", "| --- | --- | --- | --- |"]
    for path in (p for p in result_files(results) if p.suffix == ".json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        if not ("statistics" in record and "accuracy" in record and "topk" in record):
            continue   # not a run record
        link = f"[{path.name}](results/{path.relative_to(results).as_posix()})"
        if not has_vectors(record):
            lines.append(f"| {link} | {record.get('data', {}).get('n_test', 'not recorded')} | — | {NO_VECTORS} |")
            continue
        n_test = len(record["per_problem"]["problem_ids"])
        for name, by_fraction in comparisons(record).items():
            lines.append(f"| {link} | {n_test} | {name.replace('_', ' ')} | "
                         + "; ".join(f"{f}: {cell(gain)}" for f, gain in by_fraction.items()) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/results_table.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=BENCH / "results", help="the folder of result files")
    parser.add_argument("--out", type=Path, default=BENCH / "RESULTS.md")
    parser.add_argument("--check", action="store_true", help="only say whether --out is current (exit 1 if not)")
    args = parser.parse_args(argv)
    text = results_table(args.results)
    if args.check:
        current = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out} is {'current' if current else 'stale: run python bench/results_table.py'}")
        return 0 if current else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
