#!/usr/bin/env python3
"""Writes the link order of the gateway's hot code (packaging/text-order.txt) from a linker map and the
instructions profiled runs executed (scripts/bench/text-order.sh makes both).

    text-order.py MAP BINARY CALLGRIND_OUT... > packaging/text-order.txt

MAP is lld's -Map output of BINARY; each CALLGRIND_OUT is valgrind's callgrind output of a run of BINARY
with --dump-instr=yes and --compress-pos=no (every executed instruction's address). Every input section
of .text that ran is named by one of its symbols, in its order in the profiled binary, so lld's
--symbol-ordering-file puts them together at the start of .text. The kernel maps file pages 64 KiB
around every page a process touches, so code that runs spread over 8 MB makes most of the text
resident; the same code packed together takes a fraction of it.

A section is named by a symbol no other section defines, else by one whose every section is small (a
local symbol of the same name in another object pulls that section in too). A large section (over
64 KiB: a library compiled without function sections, which moves as a whole) of which under a quarter
of the pages ran is left where it is.
"""
import bisect
import collections
import re
import sys

LINE = re.compile(r"\s*([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+(\d+)( *)(.*)")
LARGE = 64 * 1024


def sections(map_path):
    """The input sections of .text: [start, size, description, [symbols]] by address."""
    result, output, current = [], None, None
    with open(map_path) as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if not m:
                continue
            depth, text = len(m.group(5)), m.group(6)
            if depth == 1:
                output, current = text, None
            elif output != ".text":
                continue
            elif depth == 9:
                current = [int(m.group(1), 16), int(m.group(3), 16), text, []]
                result.append(current)
            elif depth == 17 and current is not None:
                current[3].append(text)
    result.sort(key=lambda s: s[0])
    return result


def executed(binary, outputs, secs):
    """The link-time addresses of BINARY's instructions that ran. Callgrind gives run-time addresses: the
    load bias is the most common difference between a function's first address and its symbol's."""
    symbol = {name: s[0] for s in secs for name in s[3]}
    addresses, biases = set(), collections.Counter()
    for path in outputs:
        mine, function, first = False, None, None
        with open(path) as f:
            for line in f:
                if line.startswith("ob="):
                    mine = line[3:].strip() == binary
                elif line.startswith("fn="):
                    function, first = re.sub(r"'\d+$", "", line[3:].strip()), None
                elif mine and line.startswith("0x"):
                    address = int(line.split()[0], 16)
                    addresses.add(address)
                    if first is None and function in symbol:
                        first = address
                        biases[address - symbol[function]] += 1
    if not biases:
        sys.exit(f"text-order.py: no instruction of {binary} in {' '.join(outputs)}")
    bias = biases.most_common(1)[0][0]
    return sorted(a - bias for a in addresses)


def main(argv):
    if len(argv) < 4:
        sys.exit("usage: text-order.py MAP BINARY CALLGRIND_OUT... > text-order.txt")
    secs = sections(argv[1])
    if not secs:
        sys.exit(f"text-order.py: no .text input sections in {argv[1]} (not an lld map?)")
    starts = [s[0] for s in secs]
    defined = collections.defaultdict(list)
    for s in secs:
        for name in s[3]:
            defined[name].append(s)
    pages = collections.defaultdict(set)
    for address in executed(argv[2], argv[3:], secs):
        i = bisect.bisect_right(starts, address) - 1
        if i >= 0 and address < secs[i][0] + secs[i][1]:
            pages[i].add(address >> 12)
    named = left = unnamed = 0
    for i in sorted(pages):
        _, size, _, names = secs[i]
        if size > LARGE and len(pages[i]) * 4096 < size // 4:
            left += 1
            continue
        anchor = next((n for n in names if len(defined[n]) == 1), None)
        if anchor is None:
            anchor = next((n for n in names if all(s[1] <= LARGE for s in defined[n])), None)
        if anchor is None:
            unnamed += 1
            continue
        print(anchor)
        named += 1
    print(f"text-order.py: {named} sections ordered, {left} large mostly cold ones left in place, "
          f"{unnamed} without a symbol of their own", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
