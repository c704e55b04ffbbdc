#!/usr/bin/env python3
"""The figures of tests/k8s/cluster_chaos_test.sh, from its probers' logs and its fault marks.

  chaos_report.py DIR

DIR holds denied.jsonl, allowed.jsonl, keepalive.jsonl (chaos_prober.py) and marks.jsonl: one line
{"fault", "round", "ev": "start"|"end"|"converged", "t"} per event. For each fault round, the window
runs from its start to its convergence. Prints one line per round and a table per fault, then a JSON
line "CHAOS_RESULT {...}" with every figure, which the suite checks.
"""
import json
import sys
from collections import OrderedDict


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by the prober's stop
    return rows


def longest_gap(rows, start, end):
    """Seconds of the longest stretch in [start, end] without a successful attempt."""
    oks = [r["t"] for r in rows if r["ok"]]
    before = [t for t in oks if t < start]
    inside = [t for t in oks if start <= t <= end]
    after = [t for t in oks if t > end]
    points = ([before[-1]] if before else [start]) + inside + ([after[0]] if after else [end])
    return max(b - a for a, b in zip(points, points[1:])) if len(points) > 1 else end - start


def main():
    d = sys.argv[1]
    denied, allowed, keep = (load(d + "/" + n + ".jsonl") for n in ("denied", "allowed", "keepalive"))
    marks = load(d + "/marks.jsonl")
    rounds = OrderedDict()
    for m in marks:
        rounds.setdefault((m["fault"], m["round"]), {})[m["ev"]] = m["t"]
    result = {"rounds": [], "faults": OrderedDict(), "denied_attempts": len(denied),
              "denied_leaks": sum(1 for r in denied if r["ok"]), "allowed_attempts": len(allowed),
              "keepalive_requests": sum(1 for r in keep if r["ok"])}
    for (fault, rnd), ev in rounds.items():
        if "start" not in ev:
            continue
        start = ev["start"]
        end = ev.get("end", start)
        conv = ev.get("converged")
        stop = (conv if conv is not None else end) + 1.0
        breaks = [r for r in keep if not r["ok"] and start <= r["t"] <= stop]
        row = {
            "fault": fault, "round": rnd,
            "fault_s": round(end - start, 1),
            "converge_s": None if conv is None else round(conv - end, 1),
            "denied_tries": sum(1 for r in denied if start <= r["t"] <= stop),
            "denied_leaks": sum(1 for r in denied if r["ok"] and start <= r["t"] <= stop),
            "allowed_longest_gap_s": round(longest_gap(allowed, start, stop), 2),
            "keepalive_survived": not breaks,
            "keepalive_break": breaks[0].get("err", "") if breaks else "",
        }
        result["rounds"].append(row)
        f = result["faults"].setdefault(fault, {"rounds": 0, "denied_tries": 0, "denied_leaks": 0,
                                                "allowed_longest_gap_s": 0.0, "keepalive_survived": 0,
                                                "converge_max_s": 0.0, "unconverged": 0})
        f["rounds"] += 1
        f["denied_tries"] += row["denied_tries"]
        f["denied_leaks"] += row["denied_leaks"]
        f["allowed_longest_gap_s"] = max(f["allowed_longest_gap_s"], row["allowed_longest_gap_s"])
        f["keepalive_survived"] += 1 if row["keepalive_survived"] else 0
        if row["converge_s"] is None:
            f["unconverged"] += 1
        else:
            f["converge_max_s"] = max(f["converge_max_s"], row["converge_s"])
    for r in result["rounds"]:
        print("%-13s round %d: fault %6.1fs, converged %s, denied %d tries %d leaks, allowed longest gap %.2fs, "
              "long-lived %s" % (r["fault"], r["round"], r["fault_s"],
                                 "never" if r["converge_s"] is None else "%.1fs after" % r["converge_s"],
                                 r["denied_tries"], r["denied_leaks"], r["allowed_longest_gap_s"],
                                 "survived" if r["keepalive_survived"] else "broke (%s)" % r["keepalive_break"]))
    print()
    print("| fault | rounds | denied tries | denied leaks | allowed: longest gap | long-lived survived | "
          "converged after (max) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, f in result["faults"].items():
        conv = "%.1f s" % f["converge_max_s"] + (" (%d never)" % f["unconverged"] if f["unconverged"] else "")
        print("| %s | %d | %d | %d | %.2f s | %d of %d | %s |" % (
            name, f["rounds"], f["denied_tries"], f["denied_leaks"], f["allowed_longest_gap_s"],
            f["keepalive_survived"], f["rounds"], conv))
    print()
    print("whole run: denied %d attempts, %d accepted; allowed %d attempts; long-lived %d requests" % (
        result["denied_attempts"], result["denied_leaks"], result["allowed_attempts"], result["keepalive_requests"]))
    print("CHAOS_RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
