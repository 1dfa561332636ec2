#!/usr/bin/env python3
"""How far a tuning log's two kinds of measurement of one schedule agree.

The tuner times each candidate alone first (records `default` and `trial`: its own
forked worker, calls back to back) and the leaders again in interleaved rounds
(`remeasure`, `confirm`). For every (key, schedule) timed both ways this prints the
ratio first / interleaved, per thread count: median, 90th percentile, maximum, and
how many exceed 1.5x. A spell that slows one way of timing (e.g. a worker thread
sharing its caller's CPU) shows as a long tail.

  bench/log_consistency.py t2.jsonl [more.jsonl ...]
"""
import json
import statistics
import sys


def ratios(path):
    first, interleaved = {}, {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if 'median_us' not in r or 'schedule' not in r:
                continue
            params = r['schedule'].get('params', {})
            sid = (r['key'], r['schedule']['variant'], json.dumps(params, sort_keys=True))
            if r['kind'] in ('default', 'trial'):
                first.setdefault(sid, (r['median_us'], params.get('threads', 1)))
            elif r['kind'] in ('remeasure', 'confirm'):
                interleaved.setdefault(sid, r['median_us'])
    by_threads = {}
    for sid, (us, threads) in first.items():
        if interleaved.get(sid, 0) > 0:
            by_threads.setdefault(threads, []).append(us / interleaved[sid])
    return by_threads


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print('| log | threads | schedules | median | p90 | max | > 1.5x |')
    print('|---|---|---|---|---|---|---|')
    for path in paths:
        for threads, v in sorted(ratios(path).items()):
            v.sort()
            print(f'| {path} | {threads} | {len(v)} | {statistics.median(v):.2f} | {v[int(0.9 * (len(v) - 1))]:.2f} '
                  f'| {v[-1]:.2f} | {sum(x > 1.5 for x in v)} |')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
