#!/usr/bin/env python3
"""Writes a GGUF holding only another GGUF's tokenizer.* keys (no tensors).

`mzcache gen-model --vocab-from` copies the tokenizer from it, so a model of
any shape with a real vocabulary can be generated where the real file cannot
go (the 16-vCPU machine carries at most 64 MiB; the Gemma 3 270M file is
238 MB, its vocabulary 6.5 MB):

    python3 scripts/gguf-vocab-only.py models/gemma-3-270m-q4_k_m.gguf .bundle/gemma-vocab.gguf

Needs the `gguf` package (scripts/install-deps.sh installs it for the tests).
"""
import sys

import gguf


def main(src: str, dst: str) -> None:
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(dst, arch)
    n = 0
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[1]
            if sub == gguf.GGUFValueType.STRING:
                w.add_array(key, [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data])
            else:
                w.add_key_value(key, [f.parts[i][0].item() for i in f.data], t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(key, bytes(f.parts[f.data[0]]).decode())
        else:
            w.add_key_value(key, f.parts[f.data[0]][0].item(), t)
        n += 1
    if n == 0:
        sys.exit(f"gguf-vocab-only: {src} has no tokenizer.* keys")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"gguf-vocab-only: wrote {dst} ({n} tokenizer keys of {src})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gguf-vocab-only.py IN.gguf OUT.gguf")
    main(sys.argv[1], sys.argv[2])
