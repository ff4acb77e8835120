#!/usr/bin/env python3
"""Draws netbench.sh runs as an SVG chart (no plotting library needed): for
each measure, pasta, slirp4netns and abox-net as a ratio to the better of
pasta and slirp4netns in the same run (1.0 = the better peer; longer is
better: throughput and rates as they are, latency inverted), medians over
reps. One panel per run, e.g. MTU 65520 and MTU 1500.

Usage: plot_net.py OUT.svg TITLE=RESULTS/raw.csv [TITLE=RESULTS/raw.csv ...]
"""
import csv
import statistics
import sys

ROWS = ["pasta", "slirp4netns", "abox-net"]
COLORS = {"pasta": "#5b8def", "slirp4netns": "#9aa5b1", "abox-net": "#d9534f"}
# (test, metric, label, higher is better)
MEASURES = [("bulk_up_P1", "gbps", "bulk up, 1 stream", True), ("bulk_up_P4", "gbps", "bulk up, 4 streams", True),
            ("bulk_down_P1", "gbps", "bulk down, 1 stream", True),
            ("bulk_down_P4", "gbps", "bulk down, 4 streams", True),
            ("tcp_rr_pin", "p50_us", "TCP RR p50 (pin)", False), ("tcp_crr_pin", "per_s", "conn/s (pin)", True),
            ("udp_rr_pin", "per_s", "UDP RR/s (pin)", True)]


def medians(path):
    vals = {}
    for r in csv.DictReader(open(path)):
        try:
            v = float(r["value"])
        except ValueError:
            continue
        if int(r["rep"]) > 0:
            vals.setdefault((r["row"], r["test"], r["metric"]), []).append(v)
    return {k: statistics.median(v) for k, v in vals.items()}


def main(out, runs):
    w, left, bar, gap, scale_w = 760, 150, 9, 8, 520
    svg, y0 = [], 10
    legend = " ".join(f'<tspan fill="{COLORS[r]}">■ {r}</tspan>' for r in ROWS)
    svg.append(f'<text x="10" y="{y0 + 14}">{legend} — ratio to the better of pasta and slirp4netns '
               '(longer is better; the line is 1.0)</text>')
    y0 += 30
    for title, path in runs:
        med = medians(path)
        rows = [r for r in ROWS if any(k[0] == r for k in med)]
        peaks = []
        ratios = {}
        for t, m, label, higher in MEASURES:
            peers = [med[(r, t, m)] for r in ("pasta", "slirp4netns") if med.get((r, t, m))]
            if not peers:
                continue
            best = max(peers) if higher else min(peers)
            for r in rows:
                v = med.get((r, t, m))
                if v:
                    ratios[(label, r)] = v / best if higher else best / v
                    peaks.append(ratios[(label, r)])
        top = max(peaks + [1.0]) * 1.1
        unit = scale_w / top
        svg.append(f'<text x="10" y="{y0 + 14}" font-weight="bold">{title}</text>')
        y = y0 + 26
        first = y
        for _, _, label, _ in MEASURES:
            if not any((label, r) in ratios for r in rows):
                continue
            svg.append(f'<text x="10" y="{y + len(rows) * bar * 0.6:.1f}">{label}</text>')
            for r in rows:
                v = ratios.get((label, r))
                if v is not None:
                    svg.append(f'<rect x="{left}" y="{y}" width="{v * unit:.1f}" height="{bar - 1}" '
                               f'fill="{COLORS[r]}"/>')
                    svg.append(f'<text x="{left + v * unit + 4:.1f}" y="{y + bar - 1}" font-size="9">{v:.2f}</text>')
                y += bar
            y += gap
        svg.append(f'<line x1="{left + unit:.1f}" y1="{first - 4}" x2="{left + unit:.1f}" y2="{y - gap + 2}" '
                   'stroke="black" stroke-dasharray="3,2"/>')
        y0 = y + 14
    svg.insert(0, f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{y0}" '
                  'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 3 or any("=" not in a for a in sys.argv[2:]):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], [tuple(a.split("=", 1)) for a in sys.argv[2:]])
