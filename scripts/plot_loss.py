#!/usr/bin/env python3
"""Loss curves of fp8train runs as one SVG (standard library only).

  scripts/plot_loss.py OUT.svg LABEL=RUN_DIR [LABEL=RUN_DIR ...] [--title TEXT] [--key val_loss]

Reads RUN_DIR/metrics.jsonl; plots `loss` (thin) and `val_loss` (thick, dots) against step.
"""
import json
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def series(run_dir, key):
    pts = []
    with open(f"{run_dir}/metrics.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if key in r and r[key] is not None:
                pts.append((r["step"], r[key]))
    return pts


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    out, title, runs, args = argv[1], "", [], argv[2:]
    i = 0
    while i < len(args):
        if args[i] == "--title":
            title = args[i + 1]
            i += 2
            continue
        label, _, path = args[i].partition("=")
        runs.append((label, series(path, "loss"), series(path, "val_loss")))
        i += 1
    allpts = [p for _, a, b in runs for p in a + b]
    if not allpts:
        print("plot_loss.py: no loss values found", file=sys.stderr)
        return 1
    xmax = max(x for x, _ in allpts)
    ys = sorted(y for _, y in allpts)
    ylo, yhi = ys[0], ys[min(len(ys) - 1, int(0.98 * len(ys)))]  # clip the first steps' spike
    W, H, L, R, T, B = 800, 480, 70, 20, 40, 50
    sx = lambda x: L + (W - L - R) * x / max(1, xmax)
    sy = lambda y: T + (H - T - B) * (1 - (min(y, yhi) - ylo) / max(1e-9, yhi - ylo))
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for k in range(6):  # grid and labels
        y = ylo + (yhi - ylo) * k / 5
        svg.append(f'<line x1="{L}" x2="{W-R}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{L-6}" y="{sy(y)+4:.1f}" text-anchor="end">{y:.3f}</text>')
        x = xmax * k / 5
        svg.append(f'<text x="{sx(x):.1f}" y="{H-B+18}" text-anchor="middle">{int(x)}</text>')
    svg.append(f'<text x="{(W+L)/2}" y="{H-10}" text-anchor="middle">step</text>')
    svg.append(f'<text x="16" y="{(H+T)/2}" transform="rotate(-90 16 {(H+T)/2})" text-anchor="middle">loss (nats/token)</text>')
    for n, (label, train, val) in enumerate(runs):
        c = COLORS[n % len(COLORS)]
        if train:
            pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in train)
            svg.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1" opacity="0.45"/>')
        if val:
            pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in val)
            svg.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2.5"/>')
            svg += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>' for x, y in val]
        last = f" (val {val[-1][1]:.4f})" if val else ""
        svg.append(f'<text x="{W-R-10}" y="{T+20+18*n}" text-anchor="end" fill="{c}">{label}{last}</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
