#!/usr/bin/env python3
"""The node-count sweep's table and plot (sweep.sh): reads DIR/samples.txt, DIR/plan.txt and
DIR/head.txt, prints the table, writes DIR/ratio.svg. Standard library only.

samples.txt: K SETTING ROUND JOB WALL_MS SRUN_CPU_MS NODES_CPU_MS  (round 0: warm-up, ignored)
plan.txt:    NODE JOB SPEC PLAN_MS                                 (the plugin's debug line)
"""

import statistics
import sys
from collections import defaultdict

SETTINGS = ["empty", "unused", "gpu", "adapters"]


def med(values):
    return statistics.median(values) if values else float("nan")


def quantile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def load(d):
    samples = []
    with open(f"{d}/samples.txt") as f:
        for line in f:
            k, c, r, job, wall, srun_cpu, nodes_cpu = line.split()
            samples.append((int(k), c, int(r), int(job), float(wall), float(srun_cpu), float(nodes_cpu)))
    plans = defaultdict(list)  # job -> [ms per node]
    try:
        with open(f"{d}/plan.txt") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4:
                    plans[int(parts[1])].append(float(parts[3]))
    except OSError:
        pass
    return samples, plans


def analyse(samples, plans):
    ks = sorted({s[0] for s in samples})
    by = defaultdict(dict)  # (k, round) -> setting -> sample
    for s in samples:
        if s[2] > 0:
            by[(s[0], s[2])][s[1]] = s
    rows = {}
    for k in ks:
        row = {"k": k}
        rounds = [v for (kk, _), v in by.items() if kk == k and "empty" in v]
        for c in SETTINGS:
            got = [v[c] for v in rounds if c in v]
            row[f"{c}.wall"] = med([g[4] for g in got])
            row[f"{c}.ratio"] = med([v[c][4] / v["empty"][4] for v in rounds if c in v])
            row[f"{c}.srun"] = med([g[5] for g in got])
            row[f"{c}.srun_add"] = med([v[c][5] - v["empty"][5] for v in rounds if c in v])
            row[f"{c}.node"] = med([g[6] / k for g in got])
            row[f"{c}.node_add"] = med([(v[c][6] - v["empty"][6]) / k for v in rounds if c in v])
            ms = [m for g in got for m in plans.get(g[3], [])]
            row[f"{c}.plan"] = med(ms)
            row[f"{c}.plan90"] = quantile(ms, 0.9)
            row[f"{c}.plan_n"] = len(ms)
            row["n"] = len(rounds)
        rows[k] = row
    return ks, rows


def table(ks, rows):
    """A Markdown table (docs/plugin.md takes it as it is)."""
    out = [
        "| K | rounds | step, empty | unused | gpu | gpu:adapters | srun CPU, empty (+gpu) | node CPU per node, empty (+unused, +gpu) | plan per node, gpu: median (p90) | adapters |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in ks:
        r = rows[k]
        out.append(
            f"| {k} | {r['n']} | {r['empty.wall']:.0f} ms | {r['unused.ratio']:.3f} | {r['gpu.ratio']:.3f} | "
            f"{r['adapters.ratio']:.3f} | {r['empty.srun']:.0f} ms ({r['gpu.srun_add']:+.1f}) | "
            f"{r['empty.node']:.1f} ms ({r['unused.node_add']:+.2f}, {r['gpu.node_add']:+.2f}) | "
            f"{r['gpu.plan']:.2f} ({r['gpu.plan90']:.2f}) ms | {r['adapters.plan']:.2f} ms |"
        )
    out.append("")
    out.append(
        "(unused, gpu, gpu:adapters: median of the per-round ratios of the step's wall time to the empty "
        "plugstack's; srun CPU: srun's user+system time, and the median per-round difference with gpu; node CPU: "
        "every slurmd, slurmstepd and task of the step, divided by K, and the differences; plan: the plugin's "
        "user_init on each node, from its debug line)"
    )
    return "\n".join(out)


def svg(ks, rows, path, title):
    """Two panels against K (log scale): the step's time over the empty plugstack's, and what
    each node spends (the plugin's planning, and the CPU time gpu adds per node)."""
    import math

    w, left, right = 780, 70, 230
    pw = w - left - right
    xs = [math.log2(k) for k in ks]
    x0, x1 = min(xs), (max(xs) if max(xs) > min(xs) else min(xs) + 1)

    def px(k):
        return left + (math.log2(k) - x0) / (x1 - x0) * pw

    e = []

    def panel(top, ph, series, lo, hi, step, fmt, ylabel, ref=None):
        def py(v):
            return top + (hi - v) / (hi - lo) * ph

        v = lo
        while v <= hi + 1e-9:
            y = py(v)
            e.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="{"#999" if ref is not None and abs(v - ref) < 1e-9 else "#e5e5e5"}"/>')
            e.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
            v += step
        for k in ks:
            x = px(k)
            e.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#f0f0f0"/>')
            e.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{k}</text>')
        e.append(f'<text x="18" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 18 {top + ph / 2})">{ylabel}</text>')
        for i, (label, color, key) in enumerate(series):
            pts = [(px(k), py(rows[k][key])) for k in ks if not math.isnan(rows[k][key])]
            if pts:
                e.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}"/>')
                for x, y in pts:
                    e.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
            ly = top + 10 + 20 * i
            e.append(f'<line x1="{left + pw + 15}" y1="{ly}" x2="{left + pw + 35}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
            e.append(f'<text x="{left + pw + 40}" y="{ly + 4}">{label}</text>')

    def span(keys, lo, hi, step):
        vals = [rows[k][key] for k in ks for key in keys if not math.isnan(rows[k][key])]
        lo = min([lo] + vals)
        hi = max([hi] + vals)
        return math.floor(lo / step) * step, math.ceil(hi / step) * step

    h = 640
    e.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">')
    e.append(f'<rect width="{w}" height="{h}" fill="white"/>')
    e.append(f'<text x="{left}" y="22" font-size="14" font-weight="bold">{title}</text>')
    e.append(f'<text x="{left}" y="40" fill="#555">step time / empty plugstack (median of per-round ratios), srun -N K -n 2K true</text>')
    ratio = [("plugin loaded, unused", "#1f77b4", "unused.ratio"), ("--map-by-device=gpu", "#d62728", "gpu.ratio"),
             ("gpu:adapters", "#2ca02c", "adapters.ratio")]
    lo, hi = span([s[2] for s in ratio], 0.95, 1.10, 0.05)
    panel(55, 250, ratio, lo, hi, 0.05, lambda v: f"{v:.2f}", "ratio", ref=1.0)
    e.append(f'<text x="{left}" y="352" fill="#555">per node and step (ms): the plugin\'s planning in user_init, and the CPU time gpu adds</text>')
    e.append(f'<text x="{left}" y="368" fill="#555">to slurmd, slurmstepd and the tasks (median of per-round differences, all nodes\' CPU / K)</text>')
    per_node = [("planning (gpu), median", "#d62728", "gpu.plan"), ("planning (gpu), p90", "#ff9896", "gpu.plan90"),
                ("node CPU added by gpu", "#9467bd", "gpu.node_add"), ("node CPU added, unused", "#1f77b4", "unused.node_add")]
    lo, hi = span([s[2] for s in per_node], 0.0, 1.0, 0.5)
    panel(380, 210, per_node, lo, hi, 0.5, lambda v: f"{v:.1f}", "ms per node", ref=0.0)
    e.append(f'<text x="{left + pw / 2}" y="{h - 12}" text-anchor="middle">K (nodes in the step; two tasks per node)</text>')
    e.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(e) + "\n")


def main(d):
    samples, plans = load(d)
    ks, rows = analyse(samples, plans)
    try:
        with open(f"{d}/head.txt") as f:
            print(f.read().rstrip())
    except OSError:
        pass
    print(table(ks, rows))
    svg(ks, rows, f"{d}/ratio.svg", "map-by-device: a step's time against its node count (one 2-CPU host)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
