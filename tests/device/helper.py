#!/usr/bin/env python3
"""The parsing and the CUDA driver calls of tests/device/run.sh, one subcommand each.

    helper.py smi-gpus          < nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader
    helper.py devices-gpus      < map-by-device devices --json
    helper.py plan-tasks        < map-by-device plan ... --json
    helper.py topo-affinity     < nvidia-smi topo -m
    helper.py subset CPULIST CPULIST     # exit 0 when the first is inside the second
    helper.py find-libcuda               # the libcuda.so.1 the driver check would use
    helper.py cuda LIB                   # what the CUDA driver sees (under this environment)

Each prints tab-separated lines for the shell, or one "error: ..." line on stderr and exit 1.
Standard library only, Python 3.6 or later: the GPU machine has a python3 but nothing can be
installed there. Bus ids come out as sysfs writes them (lowercase, 4-digit domain), so that
nvidia-smi's 00000000:CA:00.0 and map-by-device's 0000:ca:00.0 compare equal.
"""

import ctypes
import json
import os
import re
import sys

BUSID = re.compile(r"^([0-9a-fA-F]+):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")
CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def fail(message):
    print("error: " + message, file=sys.stderr)
    sys.exit(1)


def norm_busid(text):
    """A PCI bus id as sysfs names it: the domain as %04x (more digits only when it needs
    them), bus and device as %02x, lowercase."""
    m = BUSID.match(text.strip())
    if not m:
        return None
    dom, bus, dev, fn = m.groups()
    return "%04x:%02x:%02x.%s" % (int(dom, 16), int(bus, 16), int(dev, 16), fn)


def cpus(text):
    """The set of CPUs of a Linux cpulist (0-3,8)."""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def smi_gpus():
    rows = 0
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3 or not fields[0].isdigit():
            fail("nvidia-smi --query-gpu line not understood: %r" % line)
        index, uuid, bus = fields
        busid = norm_busid(bus)
        if busid is None:
            fail("nvidia-smi gave bus id %r for GPU %s, not a PCI bus id" % (bus, index))
        # Kept as nvidia-smi prints it (GPU-<lowercase hex>, as map-by-device and CUDA_VISIBLE_DEVICES
        # write it too), so that a mismatch shows the value.
        print("%s\t%s\t%s" % (index, uuid, busid))
        rows += 1
    if rows == 0:
        fail("nvidia-smi listed no GPU")


def load_json():
    try:
        return json.load(sys.stdin)
    except ValueError as e:
        fail("not JSON: %s" % e)


def devices_gpus():
    doc = load_json()
    for d in doc.get("devices", []):
        if d.get("class") != "gpu":
            continue
        busid = norm_busid(d.get("busid") or "") or (d.get("busid") or "-")
        print("%s\t%s\t%s\t%s" % (busid, d.get("id") or "-", d.get("name") or "-", d.get("locality") or "-"))


def plan_tasks():
    doc = load_json()
    for t in doc.get("tasks", []):
        gpus = [d for d in t.get("devices", []) if d.get("class") == "gpu"]
        busids = ",".join(norm_busid(d.get("busid") or "") or "-" for d in gpus) or "-"
        cvd = t.get("env", {}).get("CUDA_VISIBLE_DEVICES", "-")
        print("%s\t%s\t%s\t%s" % (t.get("task"), busids, t.get("cpus") or "-", cvd))


def topo_affinity():
    """The "CPU Affinity" cell of each GPUn row of `nvidia-smi topo -m`.

    The header is tab-separated, starts with an empty cell, and may carry ANSI underline codes
    even into a pipe; its last columns have spaces in their names ("CPU Affinity", "NUMA
    Affinity", "GPU NUMA ID"). Rows are "GPU0<TAB> X <TAB>NV18<TAB>...<TAB>0-47,96-143...".
    Cells are found by the tab layout; when that does not line up (spaces instead of tabs),
    by counting the one-word device columns that come before "CPU Affinity". Prints
    "GPUn<TAB>cpulist", "GPUn<TAB>N/A" (the driver does not know), or "GPUn<TAB>?<TAB>row" (a
    cell this parser cannot read: the shell says so as a skip, with the row)."""
    lines = [ANSI.sub("", l).rstrip("\n") for l in sys.stdin]
    header = next((l for l in lines if "CPU Affinity" in l), None)
    if header is None:
        fail("no 'CPU Affinity' column in nvidia-smi topo -m")
    tab_cells = [c.strip() for c in header.split("\t")]
    tab_col = tab_cells.index("CPU Affinity") if "CPU Affinity" in tab_cells else None
    words = header.split()
    k = next((i for i in range(len(words) - 1) if words[i] == "CPU" and words[i + 1] == "Affinity"), None)
    if k is None:
        fail("'CPU Affinity' in nvidia-smi topo -m is not a column: %r" % header.strip())
    rows = 0
    for line in lines[lines.index(header) + 1:]:
        m = re.match(r"^\s*(GPU\d+)\s", line)
        if not m:
            continue
        rows += 1
        cell = None
        cells = [c.strip() for c in line.split("\t")]
        if tab_col is not None and len(cells) == len(tab_cells):
            cell = cells[tab_col]
        if cell is None or not (cell == "N/A" or CPULIST.match(cell)):
            toks = line.split()
            cell = toks[1 + k] if len(toks) > 1 + k else ""
        if cell == "N/A":
            print("%s\tN/A" % m.group(1))
        elif CPULIST.match(cell):
            print("%s\t%s" % (m.group(1), cell))
        else:
            print("%s\t?\t%s" % (m.group(1), " ".join(line.split())))
    if rows == 0:
        fail("no GPU row in nvidia-smi topo -m")


def subset(inner, outer):
    for t in (inner, outer):
        if not CPULIST.match(t):
            fail("not a cpulist: %r" % t)
    sys.exit(0 if cpus(inner) <= cpus(outer) else 1)


LIBCUDA_DIRS = ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
                "/usr/lib64", "/usr/lib/wsl/lib", "/usr/local/cuda/compat"]


def find_libcuda():
    """dlopen's own search first (LD_LIBRARY_PATH, ld.so.cache: what a CUDA program gets),
    then where drivers are mounted into containers (never the CUDA toolkit's stubs/: that
    libcuda loads, but every call fails)."""
    try:
        ctypes.CDLL("libcuda.so.1")
        # The file dlopen chose, for the log (the name alone would load the same in the
        # checks' own processes, which inherit this environment).
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "/libcuda.so" in line]
        print(paths[0] if paths else "libcuda.so.1")
        return
    except OSError:
        pass
    for d in LIBCUDA_DIRS:
        p = os.path.join(d, "libcuda.so.1")
        if not os.path.exists(p):
            continue
        try:
            ctypes.CDLL(p)
        except OSError:
            continue
        print(p)
        return
    fail("no loadable libcuda.so.1 (dlopen's search, then %s)" % ", ".join(LIBCUDA_DIRS))


def cuda(libpath):
    """cuInit, cuDeviceGetCount and, per device, cuDeviceGet, cuDeviceGetUuid(_v2), its name
    and bus id, under this process's CUDA_VISIBLE_DEVICES. Prints "driver N", "count N" and
    one "device ORDINAL UUID BUSID NAME" line each; a failing call is "error: CALL: NAME (N)"."""
    try:
        lib = ctypes.CDLL(libpath)
    except OSError as e:
        fail("cannot load %s: %s" % (libpath, e))

    def errname(res):
        name = ctypes.c_char_p()
        fn = getattr(lib, "cuGetErrorName", None)
        if fn is not None and fn(res, ctypes.byref(name)) == 0 and name.value:
            return name.value.decode(errors="replace")
        return "CUresult"

    def call(name, *args):
        res = getattr(lib, name)(*args)
        if res != 0:
            fail("%s: %s (%d)" % (name, errname(res), res))

    call("cuInit", 0)
    version = ctypes.c_int()
    call("cuDriverGetVersion", ctypes.byref(version))
    print("driver\t%d" % version.value)
    count = ctypes.c_int()
    call("cuDeviceGetCount", ctypes.byref(count))
    print("count\t%d" % count.value)
    get_uuid = "cuDeviceGetUuid_v2" if hasattr(lib, "cuDeviceGetUuid_v2") else "cuDeviceGetUuid"
    for i in range(count.value):
        dev = ctypes.c_int()
        call("cuDeviceGet", ctypes.byref(dev), i)
        raw = (ctypes.c_ubyte * 16)()
        call(get_uuid, ctypes.byref(raw), dev)
        h = "".join("%02x" % b for b in raw)
        uuid = "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
        name = ctypes.create_string_buffer(256)
        call("cuDeviceGetName", name, 256, dev)
        bus = ctypes.create_string_buffer(64)
        call("cuDeviceGetPCIBusId", bus, 64, dev)
        busid = bus.value.decode(errors="replace")
        print("device\t%d\t%s\t%s\t%s" % (i, uuid, norm_busid(busid) or busid, name.value.decode(errors="replace")))


def main(argv):
    commands = {
        "smi-gpus": (0, smi_gpus),
        "devices-gpus": (0, devices_gpus),
        "plan-tasks": (0, plan_tasks),
        "topo-affinity": (0, topo_affinity),
        "subset": (2, subset),
        "find-libcuda": (0, find_libcuda),
        "cuda": (1, cuda),
    }
    if len(argv) < 1 or argv[0] not in commands or len(argv) - 1 != commands[argv[0]][0]:
        fail("usage: helper.py %s [ARGS]" % "|".join(commands))
    commands[argv[0]][1](*argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
