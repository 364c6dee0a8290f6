"""Seeded fuzzer of scripts/heal.sh (tests/test_heal.sh runs it): the verdict reader (blamed)
on random and mangled verdict files, and the host choice (exclude) on random host lists.

  fuzz_heal.py [CASES] [SEED]     (default 150 cases a family, seed 19; make test: 100)

Each case asserts: exit 0, no signal, done within 5 s; blamed prints hosts that a "(host X)"
of the file's last "diagnose: blamed rank" line names; exclude prints a subset of the
allocation that keeps the hosts already left out and leaves at least NEED hosts whenever it
leaves out a new one, and adds only blamed hosts. Prints one line per family:
"fuzz_heal FAMILY: N cases, N clean, 0 crashes, 0 hangs, 0 wrong" and exits 1 on any failure.
"""
import os
import random
import subprocess
import sys
import tempfile

HEAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "heal.sh")
cases = int(sys.argv[1]) if len(sys.argv) > 1 else 150
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 19)
bad = 0


def run(args):
    try:
        p = subprocess.run(["bash", HEAL] + args, capture_output=True, timeout=5)
    except subprocess.TimeoutExpired:
        return "hang", b""
    if p.returncode < 0:
        return "crash", b""
    return p.returncode, p.stdout


def host(r):
    return rng.choice(["n", "gpu-", "node", "h"]) + str(rng.randrange(r))


def report(family, counts, n):
    global bad
    print("fuzz_heal %s: %d cases, %d clean, %d crashes, %d hangs, %d wrong" %
          (family, n, counts["clean"], counts["crash"], counts["hang"], counts["wrong"]))
    bad += counts["crash"] + counts["hang"] + counts["wrong"]


# --- blamed: a verdict line mangled, among random lines ---
counts = dict(clean=0, crash=0, hang=0, wrong=0)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "verdict.txt")
    for i in range(cases):
        hosts = [host(50) for _ in range(rng.randrange(1, 5))]
        line = "diagnose: blamed rank%s %s" % (
            "s" if len(hosts) > 1 else "",
            ", ".join("%d (host %s)" % (rng.randrange(64), h) for h in hosts))
        data = bytearray(line.encode())
        for _ in range(rng.choice([0, 0, 1, 3, 10])):  # flips, cuts, inserts
            k = rng.randrange(3)
            at = rng.randrange(len(data) + 1)
            if k == 0 and at < len(data):
                data[at] = rng.randrange(256)
            elif k == 1:
                del data[at:at + rng.randrange(1, 8)]
            else:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))
        noise = [bytes(rng.randrange(32, 127) for _ in range(rng.randrange(60))) for _ in range(3)]
        body = b"\n".join(noise[:rng.randrange(3)] + [bytes(data)] + noise[2:]) + b"\n"
        open(path, "wb").write(body)
        rc, out = run(["blamed", path])
        if rc in ("hang", "crash"):
            counts[rc] += 1
            continue
        got = out.decode(errors="replace").split("\n")[:-1]
        lines = [l for l in body.split(b"\n") if b"diagnose: blamed rank" in l]
        last = lines[-1].decode(errors="replace") if lines else ""
        if rc != 0 or any(("(host %s)" % h) not in last or h == "unknown" for h in got) or \
                len(got) != len(set(got)):
            counts["wrong"] += 1
            print("  blamed case %d: exit %s, %r from %r" % (i, rc, got, last))
        else:
            counts["clean"] += 1
report("blamed", counts, cases)

# --- exclude: random allocations, needs, earlier exclusions and blamed hosts ---
counts = dict(clean=0, crash=0, hang=0, wrong=0)
for i in range(cases):
    alloc = list(dict.fromkeys(host(12) for _ in range(rng.randrange(1, 9))))
    need = rng.randrange(1, len(alloc) + 2)
    excluded = rng.sample(alloc, rng.randrange(0, len(alloc))) if rng.random() < 0.5 else []
    blamed = [rng.choice(alloc) if rng.random() < 0.8 else host(30) for _ in range(rng.randrange(0, 3))]
    rc, out = run(["exclude", ",".join(alloc), str(need), ",".join(excluded), ",".join(blamed)])
    if rc in ("hang", "crash"):
        counts[rc] += 1
        continue
    got = [h for h in out.decode().strip().split(",") if h]
    prior = set(excluded) & set(alloc)
    new = set(got) - prior
    ok = rc == 0 and set(got) <= set(alloc) and prior <= set(got) and new <= set(blamed) and \
        (not new or len(alloc) - len(got) >= need)
    if ok:
        counts["clean"] += 1
    else:
        counts["wrong"] += 1
        print("  exclude case %d: %s need %d out %s blamed %s -> exit %s %s" %
              (i, alloc, need, excluded, blamed, rc, got))
report("exclude", counts, cases)
sys.exit(1 if bad else 0)
