#!/usr/bin/env python3
"""Fails when a room of gateway/ includes a higher room, or federation/ or
transport/ include gateway/. The order is the "rooms:" line of
gateway/CMakeLists.txt; rooms joined by a comma are equals (neither may
include the other)."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
order_line = next(l for l in (root / "gateway/CMakeLists.txt").read_text().splitlines()
                  if "rooms:" in l)
levels = [[r.strip() for r in level.split(",")]
          for level in order_line.split("rooms:", 1)[1].split("<")]
rank = {room: i for i, level in enumerate(levels) for room in level}
include = re.compile(r'#include "gateway/([a-z_]+)/')
bad = []
for path in sorted(root.glob("gateway/*/*")):
    room = path.parent.name
    if path.suffix not in (".h", ".cc") or room == "console":
        continue
    if room not in rank:
        bad.append(f"{path}: room {room} is not in the order of gateway/CMakeLists.txt")
        continue
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = include.match(line)
        if m and m.group(1) != room and rank.get(m.group(1), 99) >= rank[room]:
            bad.append(f"{path}:{n}: {room} includes {m.group(1)}, which is not below it")
for lower in ("federation", "transport", "base"):
    for path in sorted((root / lower).glob("*.[ch]*")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith('#include "gateway/'):
                bad.append(f"{path}:{n}: {lower}/ includes the gateway")
print("\n".join(bad) if bad else f"layering: {len(rank)} rooms, every include goes down")
sys.exit(1 if bad else 0)
