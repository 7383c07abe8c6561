#!/usr/bin/env python3
"""The helper of scripts/compare: reads criterion's results and the benches' printed tables,
writes target/compare/results.csv and docs/comparison.md.

    compare_report.py collect CRITERION_DIR CSV
        One row per (part, workload, threads, structure) from
        CRITERION_DIR/<part>_<workload>/<structure>/<threads>/new/estimates.json.
        Fails, naming every missing file, unless the whole matrix below is there.
    compare_report.py report CSV OUT_DIR DOC SUMMARY [README]
        OUT_DIR holds what scripts/compare captured: bench.log (criterion's run, with the
        rate bench's latency table), memory.txt (the memory bench's table), overestimate.md
        (the plots example's table), run.env (command, timings, load). Writes DOC (the full
        report) and SUMMARY (the short table); with README, replaces the text between
        README_BEGIN and README_END in it with the summary.

Only the standard library: no pip packages.
"""

import csv
import datetime
import json
import os
import platform
import re
import subprocess
import sys

# What each part's bench registers: the criterion group is "<part>_<workload>", the bench id
# "<structure>/<threads>". `floor` names the structure a row is divided by for "× floor";
# `peers` are the (floodgate, peer) pairs compared as "peer ÷ floodgate".
PARTS = [
    {
        "part": "estimator",
        "title": "Estimator::incr",
        "what": "one `incr(key, 1)`; sketches of 3×1024 and 4×8192 counters; the maps hold "
        "every key already (steady state, no growth)",
        "workloads": ["uniform", "zipf", "hot_key"],
        "structures": [
            ("floor_3x1024", "floor 3×1024", None),
            ("floodgate_3x1024", "floodgate 3×1024", "floor_3x1024"),
            ("pingora_3x1024", "pingora-limits 3×1024", "floor_3x1024"),
            ("floor_4x8192", "floor 4×8192", None),
            ("floodgate_4x8192", "floodgate 4×8192", "floor_4x8192"),
            ("pingora_4x8192", "pingora-limits 4×8192", "floor_4x8192"),
            ("dashmap", "DashMap", "floor_4x8192"),
            ("mutex_hashmap", "Mutex<HashMap>", "floor_4x8192"),
        ],
        "peers": [
            ("floodgate_3x1024", "pingora_3x1024"),
            ("floodgate_4x8192", "pingora_4x8192"),
            ("floodgate_4x8192", "dashmap"),
            ("floodgate_4x8192", "mutex_hashmap"),
        ],
        "note": "DashMap and Mutex<HashMap> are divided by the 4×8192 floor, the size of "
        "floodgate's default `Inflight`.",
    },
    {
        "part": "inflight",
        "title": "Inflight::incr + guard drop",
        "what": "`incr(key, 1)` (a `Guard`, one `Arc` reference count per request, like "
        "pingora-limits') or `incr_borrowed(key, 1)` (a `BorrowedGuard`) and dropping the guard, "
        "4×8192 counters; the floor is H `fetch_add`s and H `fetch_sub`s",
        "workloads": ["uniform", "zipf", "hot_key"],
        "structures": [
            ("floor_4x8192", "floor 4×8192", None),
            ("floodgate_guard", "floodgate Guard", "floor_4x8192"),
            ("floodgate_borrowed_guard", "floodgate BorrowedGuard", "floor_4x8192"),
            ("pingora", "pingora-limits", "floor_4x8192"),
        ],
        "peers": [
            ("floodgate_guard", "pingora"),
            ("floodgate_borrowed_guard", "pingora"),
        ],
        "note": "",
    },
    {
        "part": "rate_observe",
        "title": "Rate::observe",
        "what": "`observe(&key, 1)`, 4×1024 sketches, one-second windows",
        "workloads": ["uniform", "zipf"],
        "structures": [
            ("floodgate", "floodgate", None),
            ("pingora", "pingora-limits", None),
        ],
        "peers": [("floodgate", "pingora")],
        "note": "",
    },
    {
        "part": "rate_with",
        "title": "Rate::rate_with",
        "what": "`rate_with(&key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)`, 4×1024 sketches",
        "workloads": ["uniform", "zipf"],
        "structures": [
            ("floodgate", "floodgate", None),
            ("pingora", "pingora-limits", None),
        ],
        "peers": [("floodgate", "pingora")],
        "note": "",
    },
    {
        "part": "limiter",
        "title": "Limiter",
        "what": "a rate limit of 100 per second per key, real clock: floodgate `try_acquire` + "
        "permit drop (4×4096 sketch, exact stage of 1,024 keys), governor 0.10 keyed "
        "`check_key`, and an exact fixed-window DashMap limiter; zipf is s=1.1 over 1M keys, "
        "flood_10m cycles through 10,000,000 distinct keys, flood_1key sends 90% of the "
        "requests to one key (the simulated-rate groups limiter_sim_* and the accuracy table "
        "are in bench.log)",
        "workloads": ["uniform", "zipf", "flood_10m", "flood_1key"],
        "structures": [
            ("floodgate", "floodgate", None),
            ("governor_keyed", "governor keyed", None),
            ("dashmap_exact", "DashMap exact", None),
        ],
        "peers": [("floodgate", "governor_keyed"), ("floodgate", "dashmap_exact")],
        "note": "",
    },
]
THREADS = ["1t", "2t"]

# The README's short table: one-thread uniform-workload figures, one row per part, a column
# per library: (row title, part, {column: structure}).
SUMMARY_COLUMNS = ["floor", "floodgate", "pingora", "dashmap", "mutex", "governor"]
SUMMARY_HEADERS = {
    "floor": "floor",
    "floodgate": "floodgate",
    "pingora": "pingora-limits",
    "dashmap": "DashMap",
    "mutex": "Mutex<HashMap>",
    "governor": "governor keyed",
}
SUMMARY_ROWS = [
    ("`Estimator::incr`, 4×8192", "estimator", {
        "floor": "floor_4x8192", "floodgate": "floodgate_4x8192",
        "pingora": "pingora_4x8192", "dashmap": "dashmap", "mutex": "mutex_hashmap"}),
    ("`Estimator::incr`, 3×1024", "estimator", {
        "floor": "floor_3x1024", "floodgate": "floodgate_3x1024", "pingora": "pingora_3x1024"}),
    ("`Inflight::incr` + guard drop, 4×8192", "inflight", {
        "floor": "floor_4x8192", "floodgate": "floodgate_guard", "pingora": "pingora"}),
    ("the same, `incr_borrowed` (`BorrowedGuard`)", "inflight", {
        "floor": "floor_4x8192", "floodgate": "floodgate_borrowed_guard", "pingora": "pingora"}),
    ("`Rate::observe`, 4×1024", "rate_observe", {"floodgate": "floodgate", "pingora": "pingora"}),
    ("`Rate::rate_with`, 4×1024", "rate_with", {"floodgate": "floodgate", "pingora": "pingora"}),
    ("rate limit per key (DashMap: exact fixed window)", "limiter", {
        "floodgate": "floodgate", "dashmap": "dashmap_exact", "governor": "governor_keyed"}),
]

README_BEGIN = "<!-- comparison:begin (scripts/compare writes this table) -->"
README_END = "<!-- comparison:end -->"
CSV_FIELDS = ["part", "part_title", "workload", "threads", "structure", "label",
              "median_ns", "median_low_ns", "median_high_ns", "mean_ns"]


def die(message):
    print(f"compare_report: {message}", file=sys.stderr)
    sys.exit(1)


def collect(criterion_dir, csv_path):
    rows, missing = [], []
    for part in PARTS:
        for workload in part["workloads"]:
            group = f"{part['part']}_{workload}"
            for threads in THREADS:
                for structure, label, _ in part["structures"]:
                    path = os.path.join(criterion_dir, group, structure, threads, "new",
                                        "estimates.json")
                    try:
                        with open(path) as f:
                            estimates = json.load(f)
                        median = estimates["median"]
                        row = {
                            "part": part["part"],
                            "part_title": part["title"],
                            "workload": workload,
                            "threads": threads,
                            "structure": structure,
                            "label": label,
                            "median_ns": median["point_estimate"],
                            "median_low_ns": median["confidence_interval"]["lower_bound"],
                            "median_high_ns": median["confidence_interval"]["upper_bound"],
                            "mean_ns": estimates["mean"]["point_estimate"],
                        }
                    except FileNotFoundError:
                        missing.append(path)
                        continue
                    except (KeyError, TypeError, ValueError) as e:
                        die(f"{path}: not a criterion estimates file ({e!r})")
                    rows.append(row)
    if missing:
        die(f"{len(missing)} result file(s) missing; did a bench fail or change its names?\n  "
            + "\n  ".join(missing))
    # Results the table does not know: a bench that was added or renamed.
    known = {(f"{p['part']}_{w}", s, t) for p in PARTS for w in p["workloads"]
             for s, _, _ in p["structures"] for t in THREADS}
    for dirpath, _, files in os.walk(criterion_dir):
        if "estimates.json" in files and os.path.basename(dirpath) == "new":
            rel = os.path.relpath(os.path.dirname(dirpath), criterion_dir).split(os.sep)
            if len(rel) == 3 and tuple(rel) not in known:
                print(f"compare_report: warning: {'/'.join(rel)} is not in the report "
                      "(update PARTS in scripts/compare_report.py)", file=sys.stderr)
    for row in rows:
        for field in ("part_title", "label"):
            assert "," not in row[field], f"no commas in CSV labels: {row[field]}"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"compare_report: {len(rows)} results -> {csv_path}")


def load_csv(csv_path):
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    results = {}
    for row in rows:
        key = (row["part"], row["workload"], row["threads"], row["structure"])
        results[key] = {k: float(row[k]) for k in
                        ("median_ns", "median_low_ns", "median_high_ns", "mean_ns")}
    return results


def ns(value):
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def ratio(value):
    if value < 1:
        return f"{value:.2f}×"
    if value < 10:
        return f"{value:.1f}×"
    return f"{value:.0f}×"


def part_tables(part, results):
    """The full tables of one part: ns/op and × floor per structure, then floodgate vs peers."""
    p = part["part"]
    workloads = part["workloads"]
    has_floor = any(floor for _, _, floor in part["structures"])
    lines = [f"### {part['title']}", "", f"{part['what']}.", ""]
    for threads in THREADS:
        head = ["structure"]
        for w in workloads:
            head.append(f"{w} ns/op")
            if has_floor:
                head.append("× floor")
        lines.append(f"**{threads[0]} thread{'s' if threads != '1t' else ''}**"
                     + (" (ns per operation of the aggregate throughput)"
                        if threads == "2t" else ""))
        lines.append("")
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|---|" + "---:|" * (len(head) - 1))
        for structure, label, floor in part["structures"]:
            cells = [label]
            for w in workloads:
                r = results[(p, w, threads, structure)]["median_ns"]
                cells.append(ns(r))
                if has_floor:
                    if floor is None:
                        cells.append("1" if structure.startswith("floor") else "—")
                    else:
                        cells.append(ratio(r / results[(p, w, threads, floor)]["median_ns"]))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    labels = {s: label for s, label, _ in part["structures"]}
    head = ["floodgate", "peer"] + [f"{w} {t}" for w in workloads for t in THREADS]
    lines.append("**floodgate vs peers**: the peer's median ÷ floodgate's (above 1: floodgate "
                 "is faster)")
    lines.append("")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|---|---|" + "---:|" * (len(head) - 2))
    for ours, peer in part["peers"]:
        cells = [labels[ours], labels[peer]]
        for w in workloads:
            for t in THREADS:
                cells.append(ratio(results[(p, w, t, peer)]["median_ns"]
                                   / results[(p, w, t, ours)]["median_ns"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if part["note"]:
        lines += [part["note"], ""]
    return lines


def summary_table(results):
    head = ["1 thread, uniform keys, median ns/op"]
    for c in SUMMARY_COLUMNS:
        head.append(SUMMARY_HEADERS[c])
        if c == "floodgate":
            head.append("floodgate × floor")
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for title, part, columns in SUMMARY_ROWS:
        ours = results[(part, "uniform", "1t", columns["floodgate"])]["median_ns"]
        cells = [title]
        for c in SUMMARY_COLUMNS:
            structure = columns.get(c)
            value = results[(part, "uniform", "1t", structure)]["median_ns"] if structure else None
            if c == "floodgate":
                cells.append(f"**{ns(value)}**")
                floor = columns.get("floor")
                cells.append(ratio(value / results[(part, "uniform", "1t", floor)]["median_ns"])
                             if floor else "—")
            elif value is None:
                cells.append("—")
            elif c == "floor":
                cells.append(ns(value))
            else:
                cells.append(f"{ns(value)} ({ratio(value / ours)})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def read(path, what):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        die(f"{path} is missing ({what})")


def markdown_block(text, start_pattern, what, path):
    """The line matching start_pattern and the Markdown table that follows it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.search(start_pattern, line):
            block = [line.strip()]
            j = i + 1
            while j < len(lines) and not lines[j].startswith("|"):
                if lines[j].strip():
                    block.append(lines[j].strip())
                j += 1
            table = []
            while j < len(lines) and lines[j].startswith("|"):
                table.append(lines[j].rstrip())
                j += 1
            if len(table) < 3:
                die(f"{path}: the {what} table after '{line.strip()}' has no rows")
            return block, table
    die(f"{path}: no {what} table (no line matching '{start_pattern}'); did the bench fail?")


def machine():
    def run(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return ""

    lscpu = run("lscpu")
    model = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    hypervisor = re.search(r"^Hypervisor vendor:\s*(.+)$", lscpu, re.M)
    return {
        "cpu": model.group(1).strip() if model else platform.processor() or "unknown",
        "cores": str(os.cpu_count()),
        "virtual": f", {hypervisor.group(1).strip()} VM" if hypervisor else "",
        "kernel": platform.release(),
        "rustc": run("rustc", "--version").strip() or "unknown",
    }


def read_env(path):
    env = {}
    for line in read(path, "the run's settings").splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            env[key] = value
    return env


def report(csv_path, out_dir, doc_path, summary_path, readme_path=None):
    results = load_csv(csv_path)
    env = read_env(os.path.join(out_dir, "run.env"))
    m = machine()
    quick = env.get("quick") == "1"
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    machine_line = (f"{m['cpu']}, {m['cores']} cores{m['virtual']}, Linux {m['kernel']}, "
                    f"{m['rustc']}")

    bench_log = os.path.join(out_dir, "bench.log")
    latency_head, latency = markdown_block(read(bench_log, "the benches' output"),
                                           r"^rate observe latency across", "rate latency",
                                           bench_log)
    memory_txt = os.path.join(out_dir, "memory.txt")
    memory_head, memory = markdown_block(read(memory_txt, "the memory bench's output"),
                                         r"^Peak heap bytes", "peak memory", memory_txt)
    over_md = os.path.join(out_dir, "overestimate.md")
    over_head, over = markdown_block(read(over_md, "the plots example's output"),
                                     r"^Over-estimation", "over-estimation", over_md)

    summary = summary_table(results)
    quick_note = ("a quick run (`COMPARE_QUICK=1`: 0.5 s warm-up, 1 s measurement per "
                  "bench), for checking the tooling, not for quoting" if quick else "a full run")
    caption = ((f"**From {quick_note}.** " if quick else "")
               + f"Median ns per operation, one thread, uniform keys over 1,000,000; "
               f"{'a quick run' if quick else 'a full run'} of {date} on {machine_line}, load "
               f"average {env.get('load_before', '?').split(' ')[0]} at the start. In "
               "parentheses: the peer's time ÷ floodgate's (above 1: floodgate is faster). "
               "floodgate × floor: floodgate's time ÷ the floor's, H relaxed `fetch_add`s on "
               "pre-computed columns.")
    # The README's copy links the full report (relative to the repository's root).
    readme_caption = caption + " Full tables: [docs/comparison.md](docs/comparison.md)."

    # Medians whose 95% confidence interval is wide: the noise of a busy machine.
    wide = []
    for (part, workload, threads, structure), r in results.items():
        half = (r["median_high_ns"] - r["median_low_ns"]) / 2 / r["median_ns"]
        if half > 0.10:
            wide.append(f"{part}_{workload}/{structure}/{threads} ±{100 * half:.0f}%")

    doc = [
        "# floodgate vs its peers: the comparison report",
        "",
        "Written by `scripts/compare`; do not edit by hand. Re-run it to regenerate this file, "
        "`docs/overestimate.svg` and `docs/ns_per_op.svg`.",
        "",
        f"- **Machine**: {machine_line}.",
        f"- **Date**: {date}.",
        f"- **Command**: `{env.get('command', 'scripts/compare')}`, which ran "
        f"`{env.get('bench_command', '?')}`, then `{env.get('memory_command', '?')}`, then "
        f"`{env.get('plots_command', '?')}`.",
        f"- **Kind of run**: {quick_note}.",
        f"- **Load average** (1, 5, 15 min) before: {env.get('load_before', '?')}; after: "
        f"{env.get('load_after', '?')}. Wall time: benches {env.get('bench_secs', '?')} s, "
        f"memory {env.get('memory_secs', '?')} s, plots {env.get('plots_secs', '?')} s.",
        f"- **Commit**: {env.get('commit', '?')}.",
        "",
        "The machines are shared and noisy: compare ratios within this run, never absolute "
        "times across runs. Times are criterion's median per operation; with two threads, "
        "both threads work on one shared instance and the figure is the wall time over both "
        "threads' operations (the cost per operation of the aggregate throughput; per-thread "
        "latency is twice that).",
        "",
        "## Summary",
        "",
        *summary,
        "",
        caption,
        "",
        "![ns per operation by workload](ns_per_op.svg)",
        "",
        "## Every part, workload and thread count",
        "",
        "The floor is the cost no count-min sketch with H rows can go under: H relaxed "
        "`fetch_add`s (and a `min`) on columns computed before timing, no hashing "
        "(`benches/common/mod.rs`). `× floor` divides a structure's median by the floor of "
        "its size in the same run.",
        "",
    ]
    for part in PARTS:
        doc += part_tables(part, results)
    doc += [
        "## Rate: latency across window changes",
        "",
        "From `benches/rate.rs`, after its criterion groups: one thread, every call timed. "
        "pingora-limits clears a window on the request that finds it expired; floodgate's "
        "ticker clears ahead of time on its own thread.",
        "",
        *[f"{line}" for line in latency_head],
        "",
        *latency,
        "",
        "## Peak memory",
        "",
        "From `benches/memory.rs`: peak heap bytes through a counting global allocator.",
        "",
        *memory_head,
        "",
        *memory,
        "",
        "## Over-estimation against the count-min bound",
        "",
        "From `examples/plots.rs` (`docs/overestimate.svg`). Hash keys are random per "
        "instance, so these figures vary a little from run to run.",
        "",
        *over_head,
        "",
        *over,
        "",
        "![over-estimation against sketch width](overestimate.svg)",
        "",
        "## Noise",
        "",
    ]
    if wide:
        doc.append(f"{len(wide)} of {len(results)} medians have a 95% confidence interval "
                   "wider than ±10%: " + ", ".join(sorted(wide)) + ".")
    else:
        doc.append(f"All {len(results)} medians have a 95% confidence interval within ±10%.")
    doc.append("")

    with open(doc_path, "w") as f:
        f.write("\n".join(doc))
    with open(summary_path, "w") as f:
        f.write("\n".join(summary + ["", readme_caption, ""]))
    print(f"compare_report: wrote {doc_path} and {summary_path}")

    if readme_path:
        with open(readme_path) as f:
            readme = f.read()
        begin, end = readme.find(README_BEGIN), readme.find(README_END)
        if begin < 0 or end < begin:
            die(f"{readme_path}: no '{README_BEGIN}' ... '{README_END}' block to replace")
        block = "\n".join([README_BEGIN, "", *summary, "", readme_caption, "", ""])
        with open(readme_path, "w") as f:
            f.write(readme[:begin] + block + readme[end:])
        print(f"compare_report: replaced the table in {readme_path}")


def main(argv):
    if len(argv) == 3 and argv[0] == "collect":
        collect(argv[1], argv[2])
    elif len(argv) in (5, 6) and argv[0] == "report":
        report(*argv[1:])
    else:
        die("usage: compare_report.py collect CRITERION_DIR CSV\n"
            "       compare_report.py report CSV OUT_DIR DOC SUMMARY [README]")


if __name__ == "__main__":
    main(sys.argv[1:])
