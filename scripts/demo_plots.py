"""Scrape a running demo (scripts/demo.sh) every second and plot what the dashboard shows.

Grafana cannot be installed on these machines, so this computes the dashboard's queries
(deploy/observability/dashboard.json) itself from the processes' /metrics: the operator's address
from its log, each reader's from its pod log under the demo's state directory. It stops when the
demo's process exits, then writes PNG plots to the output directory and the raw samples to a CSV file
(`--replot` draws them again from that file).

    python3 scripts/demo_plots.py --work .sluice/demo --demo-pid PID --out docs/observability

Run by scripts/demo-plots.sh, which starts the demo and installs matplotlib in a venv.
"""

import argparse
import csv
import glob
import os
import re
import time
import urllib.request

OPERATOR_ADDR = re.compile(r"admin server listening.*?(127\.0\.0\.1:\d+)")
READER_ADDR = re.compile(r"sluice-reader admin listening on (127\.0\.0\.1:\d+)")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")
# The window of the rate() queries, in seconds (the dashboard's $__rate_interval on a 1 s scrape).
RATE_WINDOW = 10


def last_match(path, pattern):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = pattern.findall(f.read())
    except OSError:
        return None
    return found[-1] if found else None


def scrape(addr):
    """{(name, labels-as-text): value} of one /metrics page, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def total(samples, name):
    """sum(name): every series of the metric, whatever its labels."""
    values = [v for (n, _), v in samples.items() if n == name]
    return sum(values) if values else None


def collect(work, demo_pid, limit):
    """Rows of (t, target, name, labels, value) until the demo exits or `limit` seconds pass."""
    rows = []
    start = time.time()
    while time.time() - start < limit:
        try:
            os.kill(demo_pid, 0)
        except OSError:
            break
        now = time.time() - start
        targets = {}
        operator = last_match(os.path.join(work, "operator.log"), OPERATOR_ADDR)
        if operator:
            targets["operator"] = operator
        for log in glob.glob(os.path.join(work, "localcp", "logs", "*.log")):
            addr = last_match(log, READER_ADDR)
            if addr:
                targets[os.path.basename(log)[:-4]] = addr
        for target, addr in targets.items():
            samples = scrape(addr)
            for (name, labels), value in (samples or {}).items():
                if name.startswith("sluice_"):
                    rows.append((round(now, 2), target, name, labels, value))
        time.sleep(max(0.0, 1.0 - (time.time() - start - now)))
    return rows


def series(rows, name, target=None):
    """t -> sum over series of `name` (of one target, or of all)."""
    out = {}
    for t, tgt, n, _, v in rows:
        if n == name and (target is None or tgt == target):
            out[t] = out.get(t, 0.0) + v
    return sorted(out.items())


def summed_rate(rows, name):
    """sum(rate(name[RATE_WINDOW])): per reader, the counter's increase over the window (a reader
    that restarted starts again from zero), summed over readers at each scrape time."""
    per_target = {}
    for t, tgt, n, _, v in rows:
        if n == name and tgt != "operator":
            per_target.setdefault(tgt, {}).setdefault(t, 0.0)
            per_target[tgt][t] += v
    times = sorted({t for points in per_target.values() for t in points})
    out = []
    for t in times:
        rate = 0.0
        for points in per_target.values():
            window = [(pt, pv) for pt, pv in sorted(points.items()) if t - RATE_WINDOW <= pt <= t]
            if len(window) >= 2 and window[-1][0] > window[0][0]:
                increase = sum(b[1] - a[1] if b[1] >= a[1] else b[1] for a, b in zip(window, window[1:]))
                rate += increase / (window[-1][0] - window[0][0])
        out.append((t, rate))
    return out


def plot(rows, out):
    # Seconds since the first scrape that answered (the demo builds and starts things first).
    t0 = min((r[0] for r in rows), default=0.0)
    rows = [(round(r[0] - t0, 2),) + tuple(r[1:]) for r in rows]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(filename, title, ylabel, lines, step=False):
        fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
        # Later lines thinner, so one that coincides with an earlier one leaves it visible.
        for i, (label, points) in enumerate(lines):
            if points:
                xs, ys = zip(*points)
                style = {"where": "post"} if step else {}
                (ax.step if step else ax.plot)(xs, ys, label=label, linewidth=3.5 - i, **style)
        ax.set_title(title)
        ax.set_xlabel("seconds since the first scrape")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right")
        fig.tight_layout()
        fig.savefig(os.path.join(out, filename))
        plt.close(fig)

    draw("backlog.png", "Backlog (sluice_operator_scaler_queue_*_messages)", "messages", [
        ("visible", series(rows, "sluice_operator_scaler_queue_visible_messages")),
        ("in flight", series(rows, "sluice_operator_scaler_queue_in_flight_messages")),
        ("delayed", series(rows, "sluice_operator_scaler_queue_delayed_messages")),
    ])
    draw("replicas.png", "Replicas: desired vs ready", "readers", [
        ("desired (sluice_operator_scaler_desired_replicas)", series(rows, "sluice_operator_scaler_desired_replicas")),
        ("ready (sluice_operator_source_ready_replicas)", series(rows, "sluice_operator_source_ready_replicas")),
        ("readers reporting ready (sum sluice_reader_ready)", series(rows, "sluice_reader_ready")),
    ], step=True)
    draw("delivery.png", f"Delivery rate: sum(rate(sluice_reader_delivered_messages_total[{RATE_WINDOW}s]))",
         "messages/s", [
             ("delivered", summed_rate(rows, "sluice_reader_delivered_messages_total")),
             ("received", summed_rate(rows, "sluice_reader_received_messages_total")),
             ("deleted", summed_rate(rows, "sluice_reader_deleted_messages_total")),
         ])
    draw("epochs.png", "Checkpoint epochs (sluice_operator_checkpoint_*_epoch)", "epoch", [
        ("open", series(rows, "sluice_operator_checkpoint_open_epoch")),
        ("committed", series(rows, "sluice_operator_checkpoint_committed_epoch")),
    ], step=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=".sluice/demo")
    parser.add_argument("--demo-pid", type=int, default=0)
    parser.add_argument("--out", default="docs/observability")
    parser.add_argument("--limit", type=float, default=600)
    parser.add_argument("--csv", default=".sluice/plots/samples.csv", help="where the raw samples go")
    parser.add_argument("--replot", action="store_true", help="plot the samples of --csv again, scrape nothing")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.replot:
        with open(args.csv, newline="") as f:
            rows = [(float(t), tgt, n, labels, float(v)) for t, tgt, n, labels, v in list(csv.reader(f))[1:]]
    else:
        rows = collect(args.work, args.demo_pid, args.limit)
        os.makedirs(os.path.dirname(args.csv) or ".", exist_ok=True)
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["t_seconds", "target", "metric", "labels", "value"])
            writer.writerows(rows)
    plot(rows, args.out)
    targets = sorted({r[1] for r in rows})
    print(f"demo_plots: {len(rows)} samples from {len(targets)} targets ({', '.join(targets)}); plots in {args.out}")


if __name__ == "__main__":
    main()
