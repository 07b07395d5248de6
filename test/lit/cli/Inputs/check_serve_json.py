"""Checks the JSON `kiln bench serve --json` wrote.

usage: check_serve_json.py FILE RUNS [--output-len L]

With --http runs: each has its in-process twin (same name less " http")
with the same prompt and output token counts, and an http_overhead entry.

Every run's requests all completed; with --output-len (fixed lengths), each
run generated exactly requests x L tokens; every percentile pair is ordered
(p50 <= p99) and non-negative; the KV pool's peak is within it; a run with
the prefix cache on hit it and one with the cache off did not. RUNS is how
many runs the file must hold. Prints one line per run, then "ok", or the
problems and exit status 1.
"""
import argparse
import json
import sys

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("runs", type=int)
p.add_argument("--output-len", type=int)
args = p.parse_args()
report = json.load(open(args.file))
problems = []
runs = report["runs"]
if len(runs) != args.runs:
    problems.append(f"{len(runs)} runs, expected {args.runs}")
for run in runs:
    name = run["name"]
    print(f"{name}: {run['completed']}/{run['requests']} requests, {run['output_tokens']} output tokens, "
          f"prefix cache {'on' if run['prefix_cache'] else 'off'}")
    if run["requests"] < 1 or run["completed"] != run["requests"] or run["failed"] != 0:
        problems.append(f"{name}: {run['completed']} of {run['requests']} requests completed")
    if args.output_len and run["output_tokens"] != run["requests"] * args.output_len:
        problems.append(f"{name}: {run['output_tokens']} output tokens, expected {run['requests']} x {args.output_len}")
    for metric in ("ttft_ms", "tpot_ms"):
        p50, p99 = run[metric]["p50"], run[metric]["p99"]
        if not 0 <= p50 <= p99:
            problems.append(f"{name}: {metric} p50 {p50} and p99 {p99} are not 0 <= p50 <= p99")
    if run["ttft_ms"]["p50"] <= 0:
        problems.append(f"{name}: no time to first token")
    if run["output_tps"] <= 0 or run["total_tps"] < run["output_tps"]:
        problems.append(f"{name}: output tok/s {run['output_tps']}, total {run['total_tps']}")
    if run.get("transport") == "http":  # the pool's peak is not seen through HTTP
        if run["peak_kv_blocks"] is not None:
            problems.append(f"{name}: a peak KV figure through HTTP")
    elif not 0 < run["peak_kv_blocks"] <= run["kv_blocks_total"]:
        problems.append(f"{name}: peak KV {run['peak_kv_blocks']} of {run['kv_blocks_total']} blocks")
    rate = run["prefix_hit_rate"]
    if report["workload"] == "prefix":
        if run["prefix_cache"] and not rate > 0:
            problems.append(f"{name}: prefix hit rate {rate} with the cache on, expected > 0")
        if not run["prefix_cache"] and rate != 0:
            problems.append(f"{name}: prefix hit rate {rate} with the cache off, expected 0")
if report["workload"] == "prefix" and not report["prefix"]["speedup"]:
    problems.append("prefix: no cache on/off speedup")
if any(run.get("transport") == "http" for run in runs):
    # --http: every HTTP run beside the in-process run of the same name, and the same token counts.
    overheads = {o["run"]: o for o in report.get("http_overhead", [])}
    for run in runs:
        if run["transport"] != "http":
            continue
        base = run["name"].removesuffix(" http")
        twin = [r for r in runs if r["name"] == base and r["transport"] == "in-process"]
        if not twin or base not in overheads or not overheads[base]["output_tps_ratio"] > 0:
            problems.append(f"{run['name']}: no in-process twin or no http_overhead entry")
        elif (twin[0]["output_tokens"], twin[0]["prompt_tokens"]) != (run["output_tokens"], run["prompt_tokens"]):
            problems.append(f"{run['name']}: tokens {run['output_tokens']}/{run['prompt_tokens']}, in-process "
                            f"{twin[0]['output_tokens']}/{twin[0]['prompt_tokens']}")
        print(f"{run['name']}: HTTP / in-process output tok/s {overheads.get(base, {}).get('output_tps_ratio', 0):.3f}")
if report["workload"] == "poisson" and "max_rate_under_slo" not in report:
    problems.append("poisson: no max_rate_under_slo")
if "peer" not in report and report.get("published", {}).get("output_tps") != 17744:
    problems.append("neither a peer nor the published figure")
print("\n".join(problems) if problems else "ok")
sys.exit(1 if problems else 0)
