"""Measuring a command's own peak resident memory (the SQL limits' tests and bench/bench_build.py).

A process's ru_maxrss also counts the memory image it was forked from (Linux carries the old image's
high-water mark across exec): a child forked straight from a large parent (a pytest grown over a long
suite, a benchmark holding homes) would report the parent's peak. PEAK_RSS_WRAPPER, run as
`python -c PEAK_RSS_WRAPPER OUT_FILE COMMAND...`, is the small image the command is forked from: it runs
the command, writes the command's peak resident bytes to OUT_FILE, and exits with its exit code.
"""

PEAK_RSS_WRAPPER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""
