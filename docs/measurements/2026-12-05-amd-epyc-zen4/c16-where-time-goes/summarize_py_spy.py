"""Share of each text_embedder stub's non-idle py-spy samples by innermost Python frame.

Taken (py-spy 0.4, installed in a throwaway venv, not a project dependency) on the two stubs during a
20-s c=16 closed loop of server_probe.py against `serving serve`:
    py-spy record -p PID -d 12 -r 200 -f raw -o py-spy-instance-X.txt --nonblocking
Run: python summarize_py_spy.py py-spy-instance-a.txt py-spy-instance-b.txt
"""
import collections
import sys

for path in sys.argv[1:]:
    leaf, total = collections.Counter(), 0
    for line in open(path):
        stack, count = line.rsplit(" ", 1)
        total += int(count)
        leaf[stack.split(";")[-1][:90] or "(native: the stub's own C++ code, IPC)"] += int(count)
    print(f"{path}: {total} samples")
    for frame, count in leaf.most_common(8):
        print(f"  {100 * count / total:5.1f}% {frame}")
