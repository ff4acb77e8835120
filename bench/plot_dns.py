#!/usr/bin/env python3
"""Draws dnsbench.sh's per-run results as an SVG bar chart (no plotting
library needed): q/s per server core and p99 latency, median of the runs.

Usage: plot_dns.py RESULTS/dns_runs.tsv OUT.svg
"""
import csv
import statistics
import sys


def main(tsv, out):
    rows = list(csv.DictReader(open(tsv), delimiter="\t"))
    servers = list(dict.fromkeys(r["server"] for r in rows))
    med = {s: {k: statistics.median(float(r[k]) for r in rows if r["server"] == s)
               for k in ("qps_per_core", "p99_ms")} for s in servers}
    w, left, top, bar, gap = 720, 110, 40, 22, 12
    panels = [("q/s per server core (higher is better)", "qps_per_core", "{:,.0f}"),
              ("p99 latency at 20k q/s, ms (lower is better)", "p99_ms", "{:.2f}")]
    svg = []
    y0 = 10
    for title, key, fmt in panels:
        svg.append(f'<text x="10" y="{y0 + 15}" font-weight="bold">{title}</text>')
        top_y = y0 + top - 10
        biggest = max(med[s][key] for s in servers) or 1
        for i, s in enumerate(servers):
            y = top_y + i * (bar + gap)
            length = (w - left - 120) * med[s][key] / biggest
            color = "#d9534f" if s == "abox-net" else "#5b8def"
            svg.append(f'<text x="10" y="{y + bar * 0.7}">{s}</text>')
            svg.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" fill="{color}"/>')
            svg.append(f'<text x="{left + length + 6:.1f}" y="{y + bar * 0.7}">{fmt.format(med[s][key])}</text>')
        y0 = top_y + len(servers) * (bar + gap) + 10
    svg.insert(0, f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{y0 + 10}" '
                  'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
