"""A Megatron .bin/.idx dataset (uint16 tokens) as llm.c's token file: a
header of 256 int32 (magic 20240520, version 1, the token count) and the
tokens, so that llm.c trains on the same tokens as pretrain_gpt in the GPU kit.

  to_llmc.py PREFIX OUT.bin        # PREFIX.idx and PREFIX.bin
"""
import os
import struct
import sys


def main():
    prefix, out = sys.argv[1], sys.argv[2]
    with open(prefix + ".idx", "rb") as f:
        head = f.read(18)
    if head[:9] != b"MMIDIDX\x00\x00":
        sys.exit(f"{prefix}.idx: not a Megatron mmap index (magic {head[:9]!r})")
    version, dtype = struct.unpack("<QB", head[9:18])
    if version != 1 or dtype != 8:  # 8: uint16
        sys.exit(f"{prefix}.idx: version {version}, dtype code {dtype}; llm.c takes uint16 tokens (code 8)")
    with open(prefix + ".bin", "rb") as f:
        tokens = f.read()
    count = len(tokens) // 2
    if count >= 2**31:
        sys.exit(f"{prefix}.bin: {count} tokens; llm.c's header counts them in an int32")
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, count
    with open(out + ".tmp", "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(tokens[: 2 * count])
    os.replace(out + ".tmp", out)
    print(f"{out}: {count} tokens")


if __name__ == "__main__":
    main()
