#!/usr/bin/env python3
"""Puts a fixture's topology into a node's topology cache, for the multi-node harness (lib.sh).

    cache.py DISCOVER_LIB CACHE_FILE FIXTURE_XML SYS_ROOT [CACHE_FILE FIXTURE_XML SYS_ROOT]...

Several slurmd run on one machine, so the live discovery each one caches at its start is this
machine's, not a node with GPUs. For each node this replaces the `topology` of the cache file
its slurmd wrote with the fixture's, and leaves everything else as slurmd wrote it (format,
plugin identity, boot id, writer, lock): the steps read it through every check production
has. The file is rewritten in place (same inode): slurmd's open-file-description write lock
on it, which tells each step that its writer still runs, stays. The fixture is read by the
plugin's own discovery library (`mbd_discover`, the XML path of `topology=`), so the JSON is
the engine's own for that XML. Under SYS_ROOT it writes the state of each InfiniBand port the
fixture names (class/infiniband/DEV/ports/N/state), which a step re-reads from the cache's
sys_root: without them the fixture's adapters would read as gone.

Standard library only. Prints one line per node; exits 1 on the first failure.
"""

import ctypes
import json
import os
import re
import sys


def discover_xml(lib, xml):
    """The engine's topology JSON for a root-owned XML file, from the discovery library."""
    lib.mbd_discover.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p)]
    lib.mbd_discover.restype = ctypes.c_int
    lib.mbd_discover_free.argtypes = [ctypes.c_void_p]

    def call(interface):
        out = ctypes.c_void_p()
        rc = lib.mbd_discover(interface.encode(), xml.encode(), 30000, ctypes.byref(out))
        text = ctypes.string_at(out.value).decode() if out.value else ""
        lib.mbd_discover_free(out)
        return rc, text

    # The library names its own interface when given another one.
    rc, text = call("?")
    m = re.match(r"the discovery library is (.*), the plugin \?", text)
    if not m:
        raise RuntimeError(f"unexpected answer from the discovery library: {text}")
    rc, text = call(m.group(1))
    if rc != 0:
        raise RuntimeError(f"{xml}: {text}")
    return json.loads(text)


def ib_states(topology, sys_root):
    """Writes SYS_ROOT/class/infiniband/DEV/ports/N/state for each port of the fixture."""
    osdevs = [o for f in topology.get("pci", []) for o in f.get("osdevs", [])]
    osdevs += [l["osdev"] for l in topology.get("loose", []) if "osdev" in l]
    n = 0
    for o in osdevs:
        if o.get("osdev_type") != "OpenFabrics":
            continue
        for key, value in o.get("infos", []):
            m = re.fullmatch(r"Port(\d+)State", key)
            if not m:
                continue
            d = os.path.join(sys_root, "class/infiniband", o["name"], "ports", m.group(1))
            os.makedirs(d, mode=0o755, exist_ok=True)
            with open(os.path.join(d, "state"), "w") as f:
                f.write(f"{value}: {'ACTIVE' if value == '4' else 'DOWN'}\n")
            n += 1
    for root, dirs, files in os.walk(sys_root):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return n


def inject(cache_file, topology):
    """Replaces the cache file's topology in place (same inode, slurmd's lock kept)."""
    with open(cache_file, "r+b") as f:
        cached = json.loads(f.read())
        cached["topology"] = topology
        data = json.dumps(cached, separators=(",", ":")).encode()
        f.seek(0)
        f.write(data)
        f.truncate()
    return len(data)


def main(args):
    if len(args) < 4 or (len(args) - 1) % 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    lib = ctypes.CDLL(args[0])
    fixtures = {}
    for i in range(1, len(args), 3):
        cache_file, xml, sys_root = args[i : i + 3]
        try:
            if xml not in fixtures:
                fixtures[xml] = discover_xml(lib, xml)
            ports = ib_states(fixtures[xml], sys_root)
            size = inject(cache_file, fixtures[xml])
        except (OSError, ValueError, RuntimeError) as e:
            print(f"cache.py: {cache_file}: {e}", file=sys.stderr)
            return 1
        print(f"{cache_file}: {os.path.basename(xml)} ({size} bytes, {ports} InfiniBand port states)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
