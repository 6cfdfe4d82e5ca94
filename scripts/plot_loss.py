"""Writes an SVG loss curve from pretrain_gpt's metrics.jsonl (training loss per
logged iteration, validation loss per evaluation). No plotting library needed.
  python3 scripts/plot_loss.py metrics.jsonl loss.svg"""
import json
import sys

train, valid = [], []
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("lm_loss") is None:  # the memory plan, an interval of only skipped (fp16 overflow) steps, a non-finite loss
        continue
    # A training record has the learning rate; an evaluation has the split it read (both have consumed_samples).
    if m.get("split") == "valid":
        valid.append((m["iteration"], m["lm_loss"]))
    elif "split" not in m and "lr" in m:
        train.append((m["iteration"], m["lm_loss"]))
if not train:
    sys.exit("no training metrics in " + sys.argv[1])
W, H, P = 640, 400, 50
xs = [i for i, _ in train + valid]
ys = [v for _, v in train + valid]
x0, x1, y0, y1 = min(xs + [0]), max(xs), min(ys), max(ys)
y0, y1 = y0 - 0.05 * (y1 - y0 + 1e-9), y1 + 0.05 * (y1 - y0 + 1e-9)
sx = lambda x: P + (W - 2 * P) * (x - x0) / max(1e-9, x1 - x0)
sy = lambda y: H - P - (H - 2 * P) * (y - y0) / max(1e-9, y1 - y0)
path = lambda pts: " ".join(f"{'M' if k == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for k, (x, y) in enumerate(pts))
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{P}" y1="{H-P}" x2="{W-P}" y2="{H-P}" stroke="black"/><line x1="{P}" y1="{P}" x2="{P}" y2="{H-P}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-12}" text-anchor="middle">iteration</text>',
       f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">lm loss</text>',
       f'<text x="{W/2}" y="24" text-anchor="middle" font-size="14">pretrain_gpt loss (zerolm demo)</text>']
for k in range(5):
    y = y0 + (y1 - y0) * k / 4
    out.append(f'<text x="{P-6}" y="{sy(y)+4:.1f}" text-anchor="end">{y:.2f}</text>')
for k in range(5):
    x = x0 + (x1 - x0) * k / 4
    out.append(f'<text x="{sx(x):.1f}" y="{H-P+16}" text-anchor="middle">{x:.0f}</text>')
out.append(f'<path d="{path(train)}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
if valid:
    out.append(f'<path d="{path(valid)}" fill="none" stroke="#d62728" stroke-width="2" stroke-dasharray="6,4"/>')
    out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="#d62728"/>' for x, y in valid]
out.append(f'<text x="{W-P-150}" y="{P+10}" fill="#1f77b4">training</text><text x="{W-P-150}" y="{P+26}" fill="#d62728">validation</text>')
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print(f"wrote {sys.argv[2]}: {len(train)} training points, {len(valid)} validation points")
