#!/usr/bin/env python3
"""test_dequant_gguf.py: our scalar dequantizers (mz_dequant, a test tool
over mz_kernels_ref(type)->to_float) against an independent implementation,
the `gguf` PyPI package's NumPy dequantizers (gguf.quants.dequantize).
Dequantization is exact arithmetic on both sides: every value must be equal.

  blocks   random blocks of every block type (random bytes, f16 scales drawn
           from a sane range): Q5_0 Q5_1 IQ4_NL IQ4_XS Q2_K Q3_K Q4_K Q5_K
           Q6_K, and Q8_0 Q4_0 Q4_1
  gemma    every tensor of the real Gemma 3 270M Q4_K_M file, as llama.cpp
           wrote it (F32, Q5_0, Q4_K, Q8_0, Q6_K); scripts/fetch-gemma3.sh
           fetches it (sha256-checked, cached) when it is absent
  mixes    the real SmolLM2 weights rewritten by `mzcache quantize` in each
           mix: every tensor of each file (the files are kept in
           $MZ_TEST_TMP/mixes/ and made again when older than mzcache)

The gguf package's values for the gemma and mixes files are recorded once,
as the sha256 of each tensor's float32 values, in tests/golden/dequant/
(made by `python3 tests/unit/test_dequant_gguf.py --write-digests`, which
compares value by value as below and records the gguf package's side only;
GGUFReader alone takes seconds of CPU on Gemma's 262k-token vocabulary). A
file whose sha256 is the recorded one is checked against those digests; a
file without one (a changed quantizer) or any tensor whose digest differs is
compared with the gguf package value by value, which decides and says where.

Exit 0 pass, 1 fail, 77 skip (gguf or numpy not importable; the tools not
built). MZ_DEQUANT_MIXES="Q4_K_M Q6_K" narrows the mixes.
"""
import hashlib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MZ_BIN", os.path.join(ROOT, "build", "mzcache"))
TOOL = os.environ.get("MZ_DEQUANT", os.path.join(ROOT, "build", "mz_dequant"))
TMP = os.environ.get("MZ_TEST_TMP", os.path.join(ROOT, "build", "test-tmp"))
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
DIGESTS = os.path.join(ROOT, "tests", "golden", "dequant")
NAME = "test_dequant_gguf"
WRITE_DIGESTS = "--write-digests" in sys.argv[1:]
# Under sanitizers (MZ_SANITIZED) the quantizers run several times slower: two mixes.
MIXES = os.environ.get("MZ_DEQUANT_MIXES",
                       "Q4_K_M IQ4_NL" if os.environ.get("MZ_SANITIZED") else
                       "Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K Q5_0 Q5_1 IQ4_NL IQ4_XS Q4_K_S Q3_K_L").split()

try:
    import numpy as np
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFReader
    from gguf.quants import dequantize
except ImportError as e:
    print(f"{NAME}: skip: the gguf package cannot be imported ({e}); scripts/install-deps.sh installs it")
    sys.exit(77)

TALLY = {"pass": 0, "fail": 0}


def check(cond, what):
    """Counts a check; prints what failed."""
    TALLY["pass" if cond else "fail"] += 1
    if not cond:
        print(f"FAIL: {what}", flush=True)
    return cond


def compare(what, ours, theirs):
    """Exact equality of two float32 arrays; says where they first differ."""
    theirs = np.asarray(theirs, dtype=np.float32).reshape(-1)
    if ours.shape != theirs.shape:
        return check(False, f"{what}: {ours.size} values, gguf gives {theirs.size}")
    bad = np.flatnonzero(~((ours == theirs) | (np.isnan(ours) & np.isnan(theirs))))
    if bad.size:
        i = int(bad[0])
        return check(False, f"{what}: {bad.size} of {ours.size} values differ; first at {i}: "
                            f"ours {ours[i]!r}, gguf {theirs[i]!r}")
    return check(True, what)


# Block geometry and where each type keeps its f16 scales (byte offsets).
BLOCKS = {
    "Q8_0": (QT.Q8_0, 34, [0]), "Q4_0": (QT.Q4_0, 18, [0]), "Q4_1": (QT.Q4_1, 20, [0, 2]),
    "Q5_0": (QT.Q5_0, 22, [0]), "Q5_1": (QT.Q5_1, 24, [0, 2]), "IQ4_NL": (QT.IQ4_NL, 18, [0]),
    "IQ4_XS": (QT.IQ4_XS, 136, [0]), "Q2_K": (QT.Q2_K, 84, [80, 82]), "Q3_K": (QT.Q3_K, 110, [108]),
    "Q4_K": (QT.Q4_K, 144, [0, 2]), "Q5_K": (QT.Q5_K, 176, [0, 2]), "Q6_K": (QT.Q6_K, 210, [208]),
}


def test_blocks():
    rng = np.random.default_rng(28)
    for name, (qt, bb, scales) in BLOCKS.items():
        n = 1024
        raw = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
        for off in scales:
            mag = rng.uniform(1e-4, 2.0, size=n) * rng.choice([-1.0, 1.0], size=n)
            raw[:, off:off + 2] = mag.astype(np.float16).view(np.uint8).reshape(n, 2)
        path = os.path.join(TMP, f"dequant-{name}.bin")
        raw.tofile(path)
        p = subprocess.run([TOOL, "blocks", name, path], capture_output=True)
        if not check(p.returncode == 0, f"mz_dequant blocks {name}: {p.stderr.decode()}"):
            continue
        ours = np.frombuffer(p.stdout, dtype="<f4")
        compare(f"random {name} blocks", ours, dequantize(raw.reshape(-1), qt))
        os.unlink(path)


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def digest_path(path):
    return os.path.join(DIGESTS, os.path.basename(path)[:-len(".gguf")] + ".txt")


def recorded_digests(path, sha):
    """[(name, type, n_elements, sha256)] recorded for this very file (its sha256), else None."""
    try:
        with open(digest_path(path)) as f:
            lines = [ln.split() for ln in f if ln.strip() and not ln.startswith("#")]
    except OSError:
        return None
    if not lines or lines[0] != ["file_sha256", sha]:
        return None
    tensors = [(ln[0], ln[1], int(ln[2]), ln[3]) for ln in lines[1:] if len(ln) == 4]
    return tensors or None


def compare_digests(label, path, tensors):
    """Ours, one stream in tensor-table order, against the recorded digests of
    gguf's values; True when every tensor's equal (each counted as a check)."""
    p = subprocess.Popen([TOOL, "gguf", path], stdout=subprocess.PIPE)
    equal = []
    for name, _, n, want in tensors:
        h = hashlib.sha256()
        left = 4 * n
        while left:
            buf = p.stdout.read(min(left, 1 << 24))
            if not buf:
                break
            h.update(buf)
            left -= len(buf)
        if left or h.hexdigest() != want:
            print(f"  {label} {name}: {'stream ended early' if left else 'digest differs'}", flush=True)
            break
        equal.append(name)
    if len(equal) != len(tensors):
        p.kill()
        p.wait()
        return False
    extra = len(p.stdout.read())
    rc = p.wait()
    if extra or rc != 0:
        print(f"  {label}: mz_dequant wrote {extra} bytes more than the recorded tensors hold, exit {rc}", flush=True)
        return False
    types = {}
    for name, tname, _, _ in tensors:
        check(True, f"{label} {name} ({tname}) equal to the recorded gguf digest")
        types[tname] = types.get(tname, 0) + 1
    print(f"  {label}: {len(tensors)} tensors equal to the gguf package's recorded values: "
          + ", ".join(f"{k} ×{v}" for k, v in sorted(types.items(), key=lambda kv: -kv[1])), flush=True)
    return True


def compare_file(label, path):
    """Every tensor of a GGUF file against gguf's values: through the recorded
    digests when they are this file's and all equal, else value by value."""
    sha = file_sha256(path)
    tensors = None if WRITE_DIGESTS else recorded_digests(path, sha)
    if tensors is not None:
        if compare_digests(label, path, tensors):
            return
        print(f"  {label}: not the recorded gguf values; comparing with the gguf package value by value", flush=True)
    elif not WRITE_DIGESTS:
        print(f"  {label}: no recorded gguf digests for this file ({os.path.relpath(digest_path(path), ROOT)}, "
              f"sha256 {sha[:12]}); comparing value by value", flush=True)
    compare_values(label, path, sha)


def compare_values(label, path, sha):
    """Every tensor of a GGUF file, ours (one stream, tensor-table order) against
    gguf's, value by value; with --write-digests records gguf's side."""
    reader = GGUFReader(path)
    p = subprocess.Popen([TOOL, "gguf", path], stdout=subprocess.PIPE)
    types = {}
    ok = True
    record = []
    for t in reader.tensors:
        theirs_sha = hashlib.sha256()
        n = int(t.n_elements)
        rows = t.data.reshape(-1, t.data.shape[-1]) if t.data.ndim > 1 else t.data.reshape(1, -1)
        per_row = n // rows.shape[0]
        step = max(1, (1 << 22) // per_row)  # compare about 4M values at a time
        for r0 in range(0, rows.shape[0], step):
            chunk = rows[r0:r0 + step]
            want = n_vals = chunk.shape[0] * per_row
            buf = p.stdout.read(4 * n_vals)
            if len(buf) != 4 * want:
                check(False, f"{label} {t.name}: mz_dequant stopped after {len(buf)} bytes")
                p.kill()
                p.wait()
                return
            ours = np.frombuffer(buf, dtype="<f4")
            theirs = chunk if t.tensor_type == QT.F32 else dequantize(chunk, t.tensor_type)
            if WRITE_DIGESTS:
                theirs_sha.update(np.ascontiguousarray(theirs, dtype="<f4").tobytes())
            if not compare(f"{label} {t.name} ({t.tensor_type.name}) rows {r0}..", ours, theirs):
                ok = False
                break
        else:
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
            record.append(f"{t.name} {t.tensor_type.name} {int(t.n_elements)} {theirs_sha.hexdigest()}")
            continue
        p.kill()
        break
    p.wait()
    if ok:
        check(p.returncode == 0, f"{label}: mz_dequant exit {p.returncode}")
        print(f"  {label}: {len(reader.tensors)} tensors equal: "
              + ", ".join(f"{k} ×{v}" for k, v in sorted(types.items(), key=lambda kv: -kv[1])), flush=True)
    if WRITE_DIGESTS and ok and p.returncode == 0:
        write_digests(path, sha, record)


def write_digests(path, sha, record):
    """The gguf package's values of every tensor of path: sha256 of each
    tensor's little-endian float32 values, in tensor-table order."""
    from importlib.metadata import version
    os.makedirs(DIGESTS, exist_ok=True)
    with open(digest_path(path), "w") as f:
        f.write(f"# {os.path.basename(path)}: sha256 of the gguf package's dequantized values\n"
                f"# (gguf.quants.dequantize, little-endian float32) of each tensor, in tensor-table\n"
                f"# order: name type n_elements sha256. Made by\n"
                f"# python3 tests/unit/test_dequant_gguf.py --write-digests\n"
                f"file_sha256 {sha}\ngguf_version {version('gguf')}\n")
        f.write("\n".join(record) + "\n")
    print(f"  wrote {os.path.relpath(digest_path(path), ROOT)}", flush=True)


def test_gemma():
    if not os.path.exists(GEMMA):
        subprocess.run([os.path.join(ROOT, "scripts", "fetch-gemma3.sh")], cwd=ROOT)
    if not os.path.exists(GEMMA):
        print(f"{NAME}: gemma: skipped, {GEMMA} absent and could not be fetched")
        return
    compare_file("gemma", GEMMA)


def mix_file(mix):
    """$MZ_TEST_TMP/mixes/SmolLM2-135M-Instruct.MIX.gguf, made again when older than mzcache."""
    d = os.path.join(TMP, "mixes")
    os.makedirs(d, exist_ok=True)
    out = os.path.join(d, f"SmolLM2-135M-Instruct.{mix}.gguf")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(BIN):
        return out
    p = subprocess.run([BIN, "quantize", "-m", SMOL, "-o", out, "--type", mix],
                       capture_output=True, text=True)
    return out if check(p.returncode == 0, f"quantize {mix}: {p.stdout}{p.stderr}") else None


def test_mixes():
    if not os.path.exists(SMOL):
        print(f"{NAME}: mixes: skipped, {SMOL} absent (make model)")
        return
    for mix in MIXES:
        path = mix_file(mix)
        if path:
            compare_file(f"SmolLM2 {mix}", path)


def main():
    for tool in (TOOL, BIN):
        if not os.access(tool, os.X_OK):
            print(f"{NAME}: skip: {tool} is not built")
            return 77
    os.makedirs(TMP, exist_ok=True)
    test_blocks()
    test_gemma()
    test_mixes()
    print(f"{NAME}: {TALLY['pass']} passed, {TALLY['fail']} failed")
    return 1 if TALLY["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
