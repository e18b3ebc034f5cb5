#!/usr/bin/env python3
"""Write the project's hand-made hwloc 2.x XML topology fixtures.

    python3 topologies/gen/generate.py            # (re)write every fixture into topologies/
    python3 topologies/gen/generate.py --check    # verify files, hwloc acceptance, localities
    python3 topologies/gen/generate.py --facts    # print the per-fixture device tables (README)

Standard library only; the output is deterministic (same bytes on every run). Every value
that looks like a hardware identity (UUIDs, GUIDs, MAC addresses, serial numbers) is made up
here, mostly derived from a SHA-256 of the fixture name and PCI bus id; none is copied from a
real machine. The files imitate what `lstopo --of xml` of hwloc 2.9 writes (XML format
"2.0"): attribute order, bitmap syntax, memory children first, then normal, then I/O
children, OS devices with numeric osdev_type.

`--check` needs hwloc's command line tools (`lstopo-no-graphics`, `hwloc-calc`). It fails
when a file on disk differs from what this script generates, when hwloc prints anything on
stderr while loading a file (also with HWLOC_XML_VERBOSE=1 and HWLOC_DEBUG_CHECK=1), when
the locality hwloc computes for an OS device differs from the one recorded here, or when
README.md lacks the current device table of a fixture.
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys

GEN_DIR = os.path.dirname(os.path.abspath(__file__))
TOPO_DIR = os.path.dirname(GEN_DIR)
README = os.path.join(TOPO_DIR, "README.md")
# Fixtures only the end-to-end suite reads (not shipped, not in the golden or picture tests).
E2E_FIXTURE_DIR = os.path.join(os.path.dirname(TOPO_DIR), "tests", "e2e", "fixtures")

HWLOC_VERSION_INFO = "2.9.0"  # the hwloc whose XML export these files imitate

# ---------------------------------------------------------------------------------------
# Bitmaps and small helpers
# ---------------------------------------------------------------------------------------


def bitmap(bits):
    """hwloc's bitmap text: 32-bit words, most significant first, "0x%08x" each; leading
    zero words omitted, inner zero words empty, a zero last word written "0x0"."""
    bits = set(bits)
    if not bits:
        return "0x0"
    words = {}
    for b in bits:
        words[b // 32] = words.get(b // 32, 0) | (1 << (b % 32))
    out = []
    for i in range(max(words), -1, -1):
        w = words.get(i, 0)
        if w:
            out.append("0x%08x" % w)
        elif i == 0:
            out.append("0x0")
        else:
            out.append("")
    return ",".join(out)


def pulist(bits):
    """A sorted set of integers as a compact list: 0-15,128-143."""
    bits = sorted(set(bits))
    out = []
    i = 0
    while i < len(bits):
        j = i
        while j + 1 < len(bits) and bits[j + 1] == bits[j] + 1:
            j += 1
        out.append(str(bits[i]) if i == j else "%d-%d" % (bits[i], bits[j]))
        i = j + 1
    return ",".join(out)


def digest(*parts):
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def nvidia_uuid(*seed):
    h = digest("nvidia-uuid", *seed)
    return "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


def serial_digits(n, *seed):
    return "".join(str(int(c, 16) % 10) for c in digest("serial", *seed)[:n])


def parse_busid(busid):
    dom, bus, rest = busid.split(":")
    dev, fn = rest.split(".")
    return int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16)


def guid_from_mac(mac):
    """Mellanox-style GUID from a MAC: 9c:63:c0:fb:74:58 -> 9c63:c003:00fb:7458."""
    b = [int(x, 16) for x in mac.split(":")]
    return "%02x%02x:%02x03:00%02x:%02x%02x" % (b[0], b[1], b[2], b[3], b[4], b[5])


def gid_from_mac(mac):
    """Link-local RoCE GID of a MAC (EUI-64 with the U/L bit flipped)."""
    b = [int(x, 16) for x in mac.split(":")]
    return "fe80:0000:0000:0000:%02x%02x:%02xff:fe%02x:%02x%02x" % (
        b[0] ^ 2, b[1], b[2], b[3], b[4], b[5])


def guid_bytes(guid):
    h = guid.replace(":", "")
    return ":".join(h[i:i + 2] for i in range(0, 16, 2))


def ipoib_address(guid, qpn="00:00:10:29"):
    """20-byte IPoIB hardware address: QPN flags + subnet prefix fe80:: + port GUID."""
    return qpn + ":fe:80:00:00:00:00:00:00:" + guid_bytes(guid)


def link_speed(gen, lanes):
    """PCIe link bandwidth in GB/s as hwloc records it (pci_link_speed)."""
    per_lane = {1: 2.5 * 0.8, 2: 5.0 * 0.8, 3: 8.0 * 128 / 130, 4: 16.0 * 128 / 130,
                5: 32.0 * 128 / 130}[gen] / 8
    return per_lane * lanes


def pci_type(cls, ven, dev, sven, sdev, rev):
    return "%04x [%04x:%04x] [%04x:%04x] %02x" % (cls, ven, dev, sven, sdev, rev)


# ---------------------------------------------------------------------------------------
# Object model
# ---------------------------------------------------------------------------------------

OSDEV_TYPES = {"block": 0, "gpu": 1, "net": 2, "ofa": 3, "dma": 4, "coproc": 5}
OSDEV_KIND_NAMES = {0: "Block", 1: "GPU", 2: "Network", 3: "OpenFabrics", 4: "DMA", 5: "CoProc"}
IO_TYPES = ("Bridge", "PCIDev", "OSDev")
CACHE_LEVEL = {"L1Cache": (1, 1), "L2Cache": (2, 0), "L3Cache": (3, 0)}  # depth, cache_type


class Obj:
    def __init__(self, type_, os_index=None, children=(), infos=(), name=None, subtype=None):
        self.type = type_
        self.os_index = os_index
        self.children = list(children)
        self.infos = list(infos)
        self.name = name
        self.subtype = subtype
        self.props = []  # type-specific attributes, in hwloc's export order
        self.page_types = []
        self.parent = None
        self.cpuset = None
        self.nodeset = None
        self.gp = None
        self.logical = None
        # I/O
        self.busid = None
        self.pci_type = None
        self.speed = None
        self.host = False

    # child classes, in the order hwloc exports them
    def memory_children(self):
        return [c for c in self.children if c.type == "NUMANode"]

    def normal_children(self):
        return [c for c in self.children if c.type != "NUMANode" and c.type not in IO_TYPES]

    def io_children(self):
        return [c for c in self.children if c.type in IO_TYPES]

    def ordered_children(self):
        return self.memory_children() + self.normal_children() + self.io_children()

    def walk(self):
        yield self
        for c in self.ordered_children():
            yield from c.walk()

    def info(self, key):
        for k, v in self.infos:
            if k == key:
                return v
        return None

    def non_io_ancestor(self):
        p = self.parent
        while p.type in IO_TYPES:
            p = p.parent
        return p


# --- CPU side ---------------------------------------------------------------------------

def pu(os_index):
    return Obj("PU", os_index)


def cache(type_, spec, children, os_index=None):
    size, linesize, assoc = spec
    o = Obj(type_, os_index, children)
    depth, ctype = CACHE_LEVEL[type_]
    o.props = [("cache_size", size), ("depth", depth), ("cache_linesize", linesize),
               ("cache_associativity", assoc), ("cache_type", ctype)]
    return o


def core(c, pus, core_os, l2=None, l1=None):
    """Core c (logical order = creation order) with its PUs, under its own L1d and L2."""
    o = Obj("Core", core_os, [pu(p) for p in pus])
    if l1:
        o = cache("L1Cache", l1, [o], os_index=c)
    if l2:
        o = cache("L2Cache", l2, [o], os_index=c)
    return o


def numa(os_index, mem_bytes, subtype=None):
    o = Obj("NUMANode", os_index, subtype=subtype)
    o.props = [("local_memory", mem_bytes)]
    o.page_types = [(4096, mem_bytes // 4096), (2097152, 0), (1073741824, 0)]
    return o


def group(children):
    """A Group of kind HWLOC_GROUP_KIND_MEMORY (1001): what hwloc inserts to hold a NUMA node
    whose CPUs are a strict subset of the package."""
    o = Obj("Group", None, children)
    o.props = [("kind", 1001), ("subkind", 0)]
    return o


def package(os_index, infos, children):
    return Obj("Package", os_index, children, infos)


def machine(hostname, children, extra_infos=()):
    infos = [("Backend", "Linux"), ("OSName", "Linux"),
             ("OSRelease", "5.14.0-503.14.1.el9_5.x86_64"), ("HostName", hostname),
             ("Architecture", "x86_64"), ("hwlocVersion", HWLOC_VERSION_INFO)]
    return Obj("Machine", 0, children, list(extra_infos) + infos)


# --- I/O side ---------------------------------------------------------------------------

def hostbridge(children):
    o = Obj("Bridge", None, children)
    o.host = True
    return o


def bridge(busid, ptype, speed, children, infos=()):
    o = Obj("Bridge", None, children, infos)
    o.busid, o.pci_type, o.speed = busid, ptype, speed
    return o


def pcidev(busid, ptype, speed, osdevs=(), infos=()):
    o = Obj("PCIDev", None, osdevs, infos)
    o.busid, o.pci_type, o.speed = busid, ptype, speed
    return o


def osdev(name, kind, subtype=None, infos=(), children=()):
    o = Obj("OSDev", None, children, infos, name=name, subtype=subtype)
    o.props = [("osdev_type", OSDEV_TYPES[kind])]
    return o


def pci_names(vendor, device):
    return [("PCIVendor", vendor), ("PCIDevice", device)]


# ---------------------------------------------------------------------------------------
# Finalisation: sets, bridge ranges, gp_index, logical indexes, sanity checks
# ---------------------------------------------------------------------------------------


class Topology:
    def __init__(self, name, root, distances=(), compact_facts=False, out_dir=TOPO_DIR):
        self.name = name
        self.root = root
        self.distances = list(distances)  # (name, kind, [os indexes], matrix)
        self.compact_facts = compact_facts
        self.out_dir = out_dir
        finalize(self)

    @property
    def filename(self):
        return self.name + ".xml"

    @property
    def path(self):
        return os.path.join(self.out_dir, self.filename)

    def devices(self):
        """PCI functions with OS devices, in PCI bus order."""
        devs = [o for o in self.root.walk() if o.type == "PCIDev" and o.children]
        return sorted(devs, key=lambda o: parse_busid(o.busid))


def _set_parents(obj):
    for c in obj.children:
        c.parent = obj
        _set_parents(c)


def _cpusets(obj):
    if obj.type == "PU":
        obj.cpuset = {obj.os_index}
    elif obj.type not in IO_TYPES and obj.type != "NUMANode":
        s = set()
        for c in obj.normal_children():
            cs = _cpusets(c)
            assert not (s & cs), "overlapping children cpusets under %s" % obj.type
            s |= cs
        obj.cpuset = s
    for c in obj.memory_children():
        c.cpuset = set(obj.cpuset)
    for c in obj.io_children():
        _cpusets(c)
    return obj.cpuset


def _below(obj):
    """NUMA nodes attached to obj or to its normal descendants."""
    s = {m.os_index for m in obj.memory_children()}
    for c in obj.normal_children():
        s |= _below(c)
    return s


def _nodesets(obj, inherited):
    if obj.type == "NUMANode":
        obj.nodeset = {obj.os_index}
        return
    local = {m.os_index for m in obj.memory_children()}
    obj.nodeset = inherited | _below(obj)
    for c in obj.memory_children():
        _nodesets(c, inherited | local)
    for c in obj.normal_children():
        _nodesets(c, inherited | local)


def _bus_range(obj):
    """(domain, min bus, max bus) used by the PCI subtree of obj."""
    buses = set()
    dom = None
    for o in obj.walk():
        if o.busid:
            d, b, _, _ = parse_busid(o.busid)
            assert dom is None or dom == d, "PCI domain mix under one bridge"
            dom = d
            if o is not obj:
                buses.add(b)
    return dom, min(buses), max(buses)


def _finalize_io(obj, depth):
    """Bridge attributes (bridge_type, depth, bridge_pci) and PCI attributes."""
    if obj.type == "Bridge":
        kids = [c for c in obj.children if c.type in ("Bridge", "PCIDev")]
        assert kids, "empty bridge"
        secondary = {parse_busid(c.busid)[1] for c in kids}
        assert len(secondary) == 1, "children of a bridge on several buses"
        dom, _, sub = _bus_range(obj)
        sec = secondary.pop()
        if not obj.host:
            assert parse_busid(obj.busid)[1] < sec, "bridge %s below its own bus" % obj.busid
        obj.props = [("bridge_type", "0-1" if obj.host else "1-1"), ("depth", depth),
                     ("bridge_pci", "%04x:[%02x-%02x]" % (dom, sec, sub))]
        if not obj.host:
            obj.props += [("pci_busid", obj.busid), ("pci_type", obj.pci_type),
                          ("pci_link_speed", "%f" % obj.speed)]
        for c in obj.children:
            _finalize_io(c, depth + 1)
    elif obj.type == "PCIDev":
        obj.props = [("pci_busid", obj.busid), ("pci_type", obj.pci_type),
                     ("pci_link_speed", "%f" % obj.speed)]
        assert all(c.type == "OSDev" for c in obj.children)
    elif obj.type == "OSDev":
        assert all(c.type == "OSDev" for c in obj.children)


def finalize(topo):
    root = topo.root
    root.parent = None
    _set_parents(root)
    _cpusets(root)
    _nodesets(root, set())

    for o in root.walk():
        if o.type == "Bridge" and o.host:
            _finalize_io(o, 0)
        if o.type not in IO_TYPES:
            assert not any(c.type == "OSDev" for c in o.children), "OS device under a CPU object"

    # gp_index: CPU-side objects first, then bridges and PCI functions, then OS devices
    # (the order in which hwloc's discovery creates them), each in document order.
    gp = 1
    for phase in (lambda o: o.type not in IO_TYPES,
                  lambda o: o.type in ("Bridge", "PCIDev"),
                  lambda o: o.type == "OSDev"):
        for o in root.walk():
            if phase(o):
                o.gp = gp
                gp += 1

    # logical indexes per type (Group and cache levels are each one depth here)
    counters = {}
    for o in root.walk():
        key = o.type
        o.logical = counters.get(key, 0)
        counters[key] = o.logical + 1

    # sanity: unique PU/NUMA os indexes, unique bus ids and OS device names, sorted children
    seen = {}
    for o in root.walk():
        if o.type in ("PU", "NUMANode"):
            k = (o.type, o.os_index)
            assert k not in seen, "duplicate %s P#%d" % k
            seen[k] = o
        if o.busid:
            assert ("bus", o.busid) not in seen, "duplicate bus id " + o.busid
            seen[("bus", o.busid)] = o
        if o.type == "OSDev":
            assert ("os", o.name) not in seen, "duplicate OS device " + o.name
            seen[("os", o.name)] = o
        firsts = [min(c.cpuset) for c in o.normal_children()]
        assert firsts == sorted(firsts), "children of %s not in cpuset order" % o.type
        mems = [m.os_index for m in o.memory_children()]
        assert mems == sorted(mems)
    # vendor identities must be distinct within a fixture (AMDSerial is per card, not checked)
    ids = [(k, v) for o in root.walk() if o.type == "OSDev" for k, v in o.infos
           if k in ("NVIDIAUUID", "AMDUUID", "LevelZeroUUID", "NodeGUID", "Address")]
    assert len(ids) == len(set(ids)), "duplicate identity in " + topo.name
    pus = sorted(k[1] for k in seen if k[0] == "PU")
    assert set(pus) == root.cpuset
    for name, _kind, idx, matrix in topo.distances:
        assert len(matrix) == len(idx) and all(len(r) == len(idx) for r in matrix), name


# ---------------------------------------------------------------------------------------
# XML writer
# ---------------------------------------------------------------------------------------


def xml_escape(v):
    return (str(v).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def write_obj(o, depth, out, is_root=False):
    ind = "  " * depth
    a = [("type", o.type)]
    if o.os_index is not None:
        a.append(("os_index", o.os_index))
    if o.cpuset is not None:
        cs = bitmap(o.cpuset)
        a += [("cpuset", cs), ("complete_cpuset", cs)]
        if is_root:
            a.append(("allowed_cpuset", cs))
        ns = bitmap(o.nodeset)
        a += [("nodeset", ns), ("complete_nodeset", ns)]
        if is_root:
            a.append(("allowed_nodeset", ns))
    a.append(("gp_index", o.gp))
    if o.name is not None:
        a.append(("name", o.name))
    if o.subtype is not None:
        a.append(("subtype", o.subtype))
    a += o.props
    head = ind + "<object " + " ".join('%s="%s"' % (k, xml_escape(v)) for k, v in a)
    kids = o.ordered_children()
    if not (o.infos or o.page_types or kids):
        out.append(head + "/>")
        return
    out.append(head + ">")
    for k, v in o.infos:
        out.append('%s  <info name="%s" value="%s"/>' % (ind, xml_escape(k), xml_escape(v)))
    for size, count in o.page_types:
        out.append('%s  <page_type size="%d" count="%d"/>' % (ind, size, count))
    for c in kids:
        write_obj(c, depth + 1, out)
    out.append(ind + "</object>")


def _array(tag, values, out):
    for i in range(0, len(values), 10):
        text = "".join("%d " % v for v in values[i:i + 10])
        out.append('    <%s length="%d">%s</%s>' % (tag, len(text), text, tag))


def render(topo):
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']
    write_obj(topo.root, 1, out, is_root=True)
    for name, kind, idx, matrix in topo.distances:
        out.append('  <distances2 type="NUMANode" nbobjs="%d" kind="%d" name="%s" indexing="os">'
                   % (len(idx), kind, name))
        _array("indexes", idx, out)
        _array("u64values", [v for row in matrix for v in row], out)
        out.append("  </distances2>")
    out.append("</topology>")
    return "\n".join(out) + "\n"


def numa_latency(nodes_by_package, local=10, near=12, far=32):
    """NUMALatency distances: `local` on the diagonal, `near` within a package, `far` across."""
    pkg_of = {}
    for p, nodes in enumerate(nodes_by_package):
        for n in nodes:
            pkg_of[n] = p
    idx = sorted(pkg_of)
    matrix = [[local if a == b else near if pkg_of[a] == pkg_of[b] else far for b in idx]
              for a in idx]
    return ("NUMALatency", 5, idx, matrix)


# ---------------------------------------------------------------------------------------
# Device builders
# ---------------------------------------------------------------------------------------

GIB = 1 << 30

# (size, linesize, associativity)
ZEN5_L3, ZEN5_L2, ZEN5_L1 = (33554432, 64, 16), (1048576, 64, 16), (49152, 64, 12)
ZEN3_L3, ZEN3_L2, ZEN3_L1 = (33554432, 64, 16), (524288, 64, 8), (32768, 64, 8)
SPR_L3, SPR_L2, SPR_L1 = (110100480, 64, 15), (2097152, 64, 16), (49152, 64, 12)
GEN_L3, GEN_L2, GEN_L1 = (37748736, 64, 12), (1048576, 64, 16), (49152, 64, 12)

AMD_GPP_BRIDGE = pci_type(0x0604, 0x1022, 0x153E, 0x1022, 0x1453, 0x00)
AMD_GPP_BRIDGE_X1 = pci_type(0x0604, 0x1022, 0x1554, 0x1022, 0x1453, 0x00)
AMD_MILAN_GPP = pci_type(0x0604, 0x1022, 0x1483, 0x1022, 0x1483, 0x00)
CX7_SWITCH = pci_type(0x0604, 0x15B3, 0x1979, 0x0000, 0x0000, 0x00)
INTEL_ROOT_PORT = pci_type(0x0604, 0x8086, 0x352A, 0x8086, 0x0000, 0x04)
GENERIC_SWITCH_UP = pci_type(0x0604, 0x1000, 0xC030, 0x1000, 0x100B, 0xB0)
GENERIC_SWITCH_DOWN = pci_type(0x0604, 0x1000, 0xC030, 0x1000, 0x100B, 0xB0)

CPU_TURIN = [("CPUVendor", "AuthenticAMD"), ("CPUFamilyNumber", "26"), ("CPUModelNumber", "2"),
             ("CPUModel", "AMD EPYC 9555 64-Core Processor"), ("CPUStepping", "1")]
CPU_TRENTO = [("CPUVendor", "AuthenticAMD"), ("CPUFamilyNumber", "25"), ("CPUModelNumber", "48"),
              ("CPUModel", "AMD EPYC 7A53 64-Core Processor"), ("CPUStepping", "1")]
CPU_SPR_MAX = [("CPUVendor", "GenuineIntel"), ("CPUFamilyNumber", "6"), ("CPUModelNumber", "143"),
               ("CPUModel", "Intel(R) Xeon(R) CPU Max 9470C"), ("CPUStepping", "8")]
CPU_GENERIC = [("CPUVendor", "GenuineIntel"), ("CPUFamilyNumber", "6"), ("CPUModelNumber", "143"),
               ("CPUModel", "Intel(R) Xeon(R) Gold 6438Y+"), ("CPUStepping", "8")]
CPU_SKYLAKE = [("CPUVendor", "GenuineIntel"), ("CPUFamilyNumber", "6"), ("CPUModelNumber", "85"),
               ("CPUModel", "Intel(R) Xeon(R) Platinum 8168 CPU @ 2.70GHz"), ("CPUStepping", "4")]
PLX_SWITCH = pci_type(0x0604, 0x10B5, 0x9797, 0x10B5, 0x9797, 0xCA)
INTEL_SKX_ROOT_PORT = pci_type(0x0604, 0x8086, 0x2030, 0x8086, 0x0000, 0x04)
CPU_BROADWELL = [("CPUVendor", "GenuineIntel"), ("CPUFamilyNumber", "6"), ("CPUModelNumber", "79"),
                 ("CPUModel", "Intel(R) Xeon(R) CPU E5-2695 v4 @ 2.10GHz"), ("CPUStepping", "1")]

NVIDIA_MODELS = {
    # key: (device id, subsystem, revision, lspci name, runtime model, SMs, memory KiB, L2 KiB)
    "h200": (0x2335, (0x10DE, 0x16A5), 0xA1, "GH100 [H200 SXM 141GB]", "NVIDIA H200", 132,
             146800640, 61440),
    "h100": (0x2330, (0x10DE, 0x16C1), 0xA1, "GH100 [H100 SXM5 80GB]", "NVIDIA H100 80GB HBM3",
             132, 83886080, 51200),
    "h100pcie": (0x2331, (0x10DE, 0x1626), 0xA1, "GH100 [H100 PCIe]", "NVIDIA H100 PCIe", 114,
                 83886080, 51200),
    "a100": (0x20B2, (0x10DE, 0x1463), 0xA1, "GA100 [A100 SXM4 80GB]", "NVIDIA A100-SXM4-80GB",
             108, 83886080, 40960),
    "a100pcie": (0x20B5, (0x10DE, 0x1533), 0xA1, "GA100 [A100 PCIe 80GB]",
                 "NVIDIA A100 80GB PCIe", 108, 83886080, 40960),
    "v100sxm3": (0x1DB8, (0x10DE, 0x131D), 0xA1, "GV100GL [Tesla V100 SXM3 32GB]",
                 "Tesla V100-SXM3-32GB-H", 80, 33554432, 6144),
}


def nvidia_gpu(fx, busid, model, index=None, drm=None, cuda=True, nvml=True, names=True,
               speed=None):
    """An NVIDIA GPU function. `drm` = (card, render, render_first) for DRM OS devices;
    `index` = the CUDA/NVML ordinal; `cuda`/`nvml` = vendor-backend OS devices."""
    dev, (sven, sdev), rev, lspci, runtime, sms, mem, l2 = NVIDIA_MODELS[model]
    osdevs = []
    if drm:
        card, render, render_first = drm
        pair = [osdev("card%d" % card, "gpu"), osdev("renderD%d" % render, "gpu")]
        osdevs += pair[::-1] if render_first else pair
    if cuda:
        osdevs.append(osdev("cuda%d" % index, "coproc", "CUDA", [
            ("Backend", "CUDA"), ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", runtime),
            ("CUDAGlobalMemorySize", str(mem)), ("CUDAL2CacheSize", str(l2)),
            ("CUDAMultiProcessors", str(sms)), ("CUDACoresPerMP", "128"),
            ("CUDASharedMemorySizePerMP", "48")]))
    if nvml:
        osdevs.append(osdev("nvml%d" % index, "gpu", "NVML", [
            ("Backend", "NVML"), ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", runtime),
            ("NVIDIASerial", serial_digits(13, fx, busid)),
            ("NVIDIAUUID", nvidia_uuid(fx, busid))]))
    infos = pci_names("NVIDIA Corporation", lspci) if names else []
    return pcidev(busid, pci_type(0x0302, 0x10DE, dev, sven, sdev, rev),
                  speed if speed is not None else link_speed(5, 16), osdevs, infos)


def aspeed_vga(busid, card=0, names=True):
    """The BMC display adapter: class 0300, a DRM card node and no render node."""
    osdevs = [osdev("card%d" % card, "gpu")] if card is not None else []
    infos = pci_names("ASPEED Technology, Inc.", "ASPEED Graphics Family") if names else []
    return pcidev(busid, pci_type(0x0300, 0x1A03, 0x2000, 0x1A03, 0x2000, 0x52), 0.0, osdevs,
                  infos)


def aspeed_bridge(busid, children, names=True):
    infos = pci_names("ASPEED Technology, Inc.", "AST1150 PCI-to-PCI Bridge") if names else []
    return bridge(busid, pci_type(0x0604, 0x1A03, 0x1150, 0x1A03, 0x1150, 0x06), 0.25, children,
                  infos)


def ofa_infos(guid, sysimage, lid, gid0):
    return [("NodeGUID", guid), ("SysImageGUID", sysimage), ("Port1State", "4"),
            ("Port1LID", lid), ("Port1LMC", "0"), ("Port1GID0", gid0)]


def mlx_ib_hca(busid, netname, ofaname, mac, lid, ids=(0x1021, 0x15B3, 0x0041),
               device_name="MT2910 Family [ConnectX-7]", speed=None, names=True):
    """An InfiniBand HCA function (class 0207): IPoIB netdev + OpenFabrics device."""
    dev, sven, sdev = ids
    guid = guid_from_mac(mac)
    osdevs = [osdev(netname, "net", infos=[("Address", ipoib_address(guid)), ("Port", "1")]),
              osdev(ofaname, "ofa", infos=ofa_infos(guid, guid, lid,
                                                    "fe80:0000:0000:0000:" + guid))]
    infos = pci_names("Mellanox Technologies", device_name) if names else []
    return pcidev(busid, pci_type(0x0207, 0x15B3, dev, sven, sdev, 0x00),
                  speed if speed is not None else link_speed(5, 16), osdevs, infos)


def mlx_eth_port(busid, netname, ofaname, mac, sysimage_mac, speed):
    """One function of a dual-port ConnectX-6 Lx Ethernet card (class 0200, RoCE)."""
    guid = guid_from_mac(mac)
    osdevs = [osdev(netname, "net", infos=[("Address", mac), ("Port", "1")]),
              osdev(ofaname, "ofa", infos=ofa_infos(guid, guid_from_mac(sysimage_mac), "0x0",
                                                    gid_from_mac(mac)))]
    return pcidev(busid, pci_type(0x0200, 0x15B3, 0x101F, 0x15B3, 0x0016, 0x00), speed, osdevs,
                  pci_names("Mellanox Technologies", "MT2894 Family [ConnectX-6 Lx]"))


def eth_nic(busid, netname, mac, ids, vendor_name, device_name, speed, names=True):
    ven, dev, sven, sdev, rev = ids
    infos = pci_names(vendor_name, device_name) if names else []
    return pcidev(busid, pci_type(0x0200, ven, dev, sven, sdev, rev), speed,
                  [osdev(netname, "net", infos=[("Address", mac)])], infos)


def nvme(fx, busid, blockname, size_kib, model, ids=(0x144D, 0xA80C, 0x144D, 0xA812, 0x00),
         major_minor="259:0", speed=None, names=True):
    ven, dev, sven, sdev, rev = ids
    blk = osdev(blockname, "block", "Disk", [
        ("Size", str(size_kib)), ("SectorSize", "512"), ("LinuxDeviceID", major_minor),
        ("Vendor", model.split()[0].capitalize()), ("Model", model),
        ("Revision", "GDC7302Q"), ("SerialNumber", "S7" + digest("nvme", fx, busid)[:12].upper())])
    infos = pci_names("Samsung Electronics Co Ltd", "NVMe SSD Controller PM174X") if names else []
    return pcidev(busid, pci_type(0x0108, ven, dev, sven, sdev, rev),
                  speed if speed is not None else link_speed(5, 4), [blk], infos)


def slingshot_nic(busid, netname, mac, speed):
    return pcidev(busid, pci_type(0x0200, 0x17DB, 0x0501, 0x17DB, 0x0000, 0x02), speed,
                  [osdev(netname, "net", infos=[("Address", mac)])],
                  pci_names("Cray Inc", "Cassini 1 [Slingshot 200Gb]"))


def root_port_for(dev, rp_busid, ptype=AMD_GPP_BRIDGE, speed=None):
    return bridge(rp_busid, ptype, speed if speed is not None else dev.speed, [dev])


def sub_bus(busid, delta):
    d, b, _, _ = parse_busid(busid)
    return "%04x:%02x" % (d, b + delta)


# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------


def fx_turin_h200():
    """The requester's 2-socket AMD EPYC 9555 (Turin) + 4 x H200 node of the design spec."""
    fx = "turin-h200"
    g5x16 = link_speed(5, 16)

    def gpu_and_hca(base, hca, gpu):
        """Root port base:01.1 -> ConnectX-7 integrated switch; HCA at base+3, GPU at base+6."""
        b = lambda n, rest: "0000:%02x:%s" % (base + n, rest)
        return hostbridge([
            bridge(b(0, "01.1"), AMD_GPP_BRIDGE, g5x16, [
                bridge(b(1, "00.0"), CX7_SWITCH, g5x16, [
                    bridge(b(2, "00.0"), CX7_SWITCH, g5x16, [hca]),
                    bridge(b(2, "02.0"), CX7_SWITCH, g5x16, [
                        bridge(b(4, "00.0"), CX7_SWITCH, g5x16, [
                            bridge(b(5, "00.0"), CX7_SWITCH, g5x16, [gpu])])])])])])

    def h200(busid, n):
        return nvidia_gpu(fx, busid, "h200", index=n, drm=(n + 1, 128 + n, False))

    def hca(busid, net, ofa, last_byte, lid):
        return mlx_ib_hca(busid, net, ofa, "9c:63:c0:fb:74:%02x" % last_byte, lid)

    io = {
        0: [hostbridge([
                root_port_for(eth_nic("0000:51:00.0", "eno6", "6c:fe:54:3a:0e:12",
                                      (0x14E4, 0x165F, 0x17AA, 0x4059, 0x00),
                                      "Broadcom Inc. and subsidiaries",
                                      "NetXtreme BCM5720 Gigabit Ethernet PCIe",
                                      link_speed(2, 1)),
                              "0000:50:03.4", AMD_GPP_BRIDGE_X1),
                bridge("0000:50:04.1", AMD_GPP_BRIDGE_X1, 0.25, [
                    aspeed_bridge("0000:52:00.0", [aspeed_vga("0000:53:00.0", card=0)])])]),
            hostbridge([
                root_port_for(nvme(fx, "0000:71:00.0", "nvme0n1", 3750738264,
                                   "SAMSUNG MZWLO3T8HCLS-00A07", major_minor="259:0"),
                              "0000:70:01.2"),
                root_port_for(nvme(fx, "0000:72:00.0", "nvme1c1n1", 937692504,
                                   "SAMSUNG MZQL2960HCJR-00A07", major_minor="259:2"),
                              "0000:70:01.3")])],
        1: [gpu_and_hca(0x00, hca("0000:03:00.0", "ib3x", "mlx5_0", 0x58, "0x1a7"),
                        h200("0000:06:00.0", 0))],
        2: [gpu_and_hca(0x10, hca("0000:13:00.0", "ib2x", "mlx5_3", 0x5c, "0x1a8"),
                        h200("0000:16:00.0", 1))],
        3: [hostbridge([bridge("0000:60:01.3", AMD_GPP_BRIDGE, link_speed(4, 8), [
                mlx_eth_port("0000:61:00.0", "eno4np0", "mlx5_1", "9c:63:c0:2e:11:a0",
                             "9c:63:c0:2e:11:a0", link_speed(4, 8)),
                mlx_eth_port("0000:61:00.1", "eno5np1", "mlx5_2", "9c:63:c0:2e:11:a1",
                             "9c:63:c0:2e:11:a0", link_speed(4, 8))])])],
        6: [gpu_and_hca(0x90, hca("0000:93:00.0", "ib1x", "mlx5_4", 0x60, "0x1a9"),
                        h200("0000:96:00.0", 2))],
        7: [gpu_and_hca(0xE0, hca("0000:e3:00.0", "ib0", "mlx5_5", 0x64, "0x1aa"),
                        h200("0000:e6:00.0", 3))],
    }
    packages = []
    for p in range(2):
        groups = []
        for k in range(4 * p, 4 * p + 4):
            l3s = []
            for j in range(2):
                cores = range(16 * k + 8 * j, 16 * k + 8 * j + 8)
                l3s.append(cache("L3Cache", ZEN5_L3,
                                 [core(c, [c, c + 128], c % 64, ZEN5_L2, ZEN5_L1) for c in cores],
                                 os_index=2 * k + j))
            groups.append(group([numa(k, 188 * GIB)] + l3s + io.get(k, [])))
        packages.append(package(p, CPU_TURIN, groups))
    return Topology(fx, machine(fx, packages),
                    [numa_latency([range(0, 4), range(4, 8)])])


def fx_uneven_3plus1():
    fx = "uneven-3plus1"
    gpus = {0: "0000:18:00.0", 1: "0000:2a:00.0", 2: "0000:3c:00.0", 5: "0000:ab:00.0"}
    order = sorted(gpus.values(), key=parse_busid)
    packages = []
    for p in range(2):
        groups = []
        for k in range(4 * p, 4 * p + 4):
            kids = [numa(k, 64 * GIB)]
            kids += [core(c, [c], c % 8, GEN_L2, GEN_L1) for c in (2 * k, 2 * k + 1)]
            if k in gpus:
                g = nvidia_gpu(fx, gpus[k], "a100", index=order.index(gpus[k]),
                               speed=link_speed(4, 16))
                rp = "%s:01.0" % sub_bus(gpus[k], -1)
                kids.append(hostbridge([root_port_for(g, rp, INTEL_ROOT_PORT)]))
            groups.append(group(kids))
        packages.append(package(p, CPU_GENERIC, groups))
    return Topology(fx, machine(fx, packages), [numa_latency([range(0, 4), range(4, 8)], near=11, far=21)])


def _two_gpu_complex(fx, base, first_index, model="h100pcie"):
    """Host bridge -> root port base:01.0 -> PCIe switch -> GPUs at base+3 and base+4."""
    g5 = link_speed(5, 16)
    b = lambda n, rest: "0000:%02x:%s" % (base + n, rest)
    return hostbridge([
        bridge(b(0, "01.0"), INTEL_ROOT_PORT, g5, [
            bridge(b(1, "00.0"), GENERIC_SWITCH_UP, g5, [
                bridge(b(2, "00.0"), GENERIC_SWITCH_DOWN, g5, [
                    nvidia_gpu(fx, b(3, "00.0"), model, index=first_index)]),
                bridge(b(2, "01.0"), GENERIC_SWITCH_DOWN, g5, [
                    nvidia_gpu(fx, b(4, "00.0"), model, index=first_index + 1)])])])])


def _degenerate_cpu_package(p, extra):
    cores = [core(c, [c], c % 8, GEN_L2, GEN_L1) for c in range(8 * p, 8 * p + 8)]
    return package(p, CPU_GENERIC, [numa(p, 256 * GIB), cache("L3Cache", GEN_L3, cores, os_index=p)]
                   + extra)


def fx_degenerate_one_complex():
    fx = "degenerate-one-complex"
    packages = [_degenerate_cpu_package(0, [_two_gpu_complex(fx, 0x00, 0)]),
                _degenerate_cpu_package(1, [_two_gpu_complex(fx, 0x80, 2)])]
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


def fx_degenerate_machine():
    fx = "degenerate-machine"
    packages = [_degenerate_cpu_package(0, []), _degenerate_cpu_package(1, [])]
    io = [_two_gpu_complex(fx, 0x00, 0), _two_gpu_complex(fx, 0x80, 2)]
    return Topology(fx, machine(fx, packages + io), [numa_latency([[0], [1]], near=10, far=21)])


# AMD MI250X node (Frontier / LUMI-G / Tioga shape). L3 (CCD) index -> devices behind it:
# (GCD bus, Slingshot NIC bus or None). GCD runtime index = position in PCI bus order.
MI250X_L3 = {0: ("d1", None), 1: ("d6", "d5"), 2: ("c9", None), 3: ("ce", "cd"),
             4: ("d9", None), 5: ("de", "dd"), 6: ("c1", None), 7: ("c6", "c5")}
MI250X_SHORT_UUID_BUS = "d6"  # this GCD's AMDUUID has a leading zero nibble dropped


def fx_amd_mi250x():
    fx = "amd-mi250x"
    gcd_buses = sorted(v[0] for v in MI250X_L3.values())
    nic_buses = sorted(v[1] for v in MI250X_L3.values() if v[1])
    g4 = link_speed(4, 16)
    hive = digest("xgmi-hive", fx)[:16]

    def amd_uuid(bus):
        if bus == MI250X_SHORT_UUID_BUS:
            return "5f2a0b1c3d4e5f6"  # 15 digits: hwloc prints "%lx", so 0x05f2a... loses its 0
        h = digest("amd-uuid", fx, bus)
        return ("%x" % (8 + int(h[0], 16) % 8)) + h[1:16]  # 16 digits, non-zero first digit

    def gcd(bus):
        n = gcd_buses.index(bus)
        card_serial = serial_digits(12, fx, "card", str(n // 2))  # 2 GCDs per MI250X package
        peers = " ".join("rsmi%d" % i for i in range(8) if i != n) + " "
        osdevs = [osdev("card%d" % n, "gpu"), osdev("renderD%d" % (128 + n), "gpu"),
                  osdev("rsmi%d" % n, "gpu", "RSMI", [
                      ("Backend", "RSMI"), ("GPUVendor", "AMD"), ("GPUModel", "AMD Instinct MI250X"),
                      ("AMDSerial", card_serial), ("AMDUUID", amd_uuid(bus)),
                      ("XGMIHiveID", hive), ("RSMIVRAMSize", "67092480"),
                      ("RSMIVisibleVRAMSize", "67092480"), ("RSMIGTTSize", "263923984"),
                      ("XGMIPeers", peers)])]
        return pcidev("0000:%s:00.0" % bus, pci_type(0x0380, 0x1002, 0x7408, 0x1002, 0x0B0C, 0x01),
                      g4, osdevs, pci_names("Advanced Micro Devices, Inc. [AMD/ATI]",
                                            "Aldebaran/MI200 [Instinct MI250X]"))

    def nic(bus):
        n = nic_buses.index(bus)
        return slingshot_nic("0000:%s:00.0" % bus, "hsi%d" % n,
                             "02:00:00:00:%02x:%02x" % (0x1c, 0x40 + n), g4)

    def l3_io(l3):
        gbus, nbus = MI250X_L3[l3]
        hb = int(gbus, 16) - (2 if nbus else 1)
        ports = []
        if nbus:
            ports.append(root_port_for(nic(nbus), "0000:%02x:01.1" % hb, AMD_MILAN_GPP))
        ports.append(root_port_for(gcd(gbus), "0000:%02x:07.1" % hb, AMD_MILAN_GPP))
        return [hostbridge(ports)]

    groups = []
    for k in range(4):
        l3s = []
        for j in range(2):
            l3 = 2 * k + j
            cores = [core(c, [c, c + 64], c, ZEN3_L2, ZEN3_L1) for c in range(8 * l3, 8 * l3 + 8)]
            l3s.append(cache("L3Cache", ZEN3_L3, cores + l3_io(l3), os_index=l3))
        groups.append(group([numa(k, 125 * GIB)] + l3s))
    pkg = package(0, CPU_TRENTO, groups)
    return Topology(fx, machine("mi250x-node", [pkg]), [numa_latency([range(4)])])


def fx_intel_pvc():
    """Aurora-like: 2 x Xeon Max (trimmed to 8 cores), 6 x Data Center GPU Max 1550."""
    fx = "intel-pvc"
    gpu_buses = ["0000:18:00.0", "0000:42:00.0", "0000:6c:00.0",
                 "0001:18:00.0", "0001:42:00.0", "0001:6c:00.0"]
    nic_buses = ["0000:29:00.0", "0000:53:00.0", "0001:29:00.0", "0001:53:00.0"]
    g5 = link_speed(5, 16)
    g4 = link_speed(4, 16)

    def ze_uuid(*seed):
        return "8680d60b" + digest("ze-uuid", fx, *seed)[:24]

    def pvc(busid):
        n = gpu_buses.index(busid)
        subs = []
        for k in range(2):
            subs.append(osdev("ze%d.%d" % (n, k), "coproc", "LevelZero", [
                ("Backend", "LevelZero"), ("LevelZeroSubdeviceID", str(k)),
                ("LevelZeroDeviceType", "GPU"), ("LevelZeroUUID", ze_uuid(busid, str(k))),
                ("LevelZeroHBMSize", "67108864")]))
        ze = osdev("ze%d" % n, "coproc", "LevelZero", [
            ("Backend", "LevelZero"), ("LevelZeroDriverIndex", "0"),
            ("LevelZeroDriverDeviceIndex", str(n)), ("LevelZeroDeviceType", "GPU"),
            ("LevelZeroUUID", ze_uuid(busid)), ("LevelZeroVendor", "Intel(R) Corporation"),
            ("LevelZeroModel", "Intel(R) Data Center GPU Max 1550"),
            ("LevelZeroSerialNumber", "LQAC" + serial_digits(8, fx, busid)),
            ("LevelZeroSubdevices", "2"), ("LevelZeroHBMSize", "134217728")], children=subs)
        dev = pcidev(busid, pci_type(0x0380, 0x8086, 0x0BD6, 0x8086, 0x0BD6, 0x2F), g5,
                     [osdev("card%d" % n, "gpu"), osdev("renderD%d" % (128 + n), "gpu"), ze],
                     pci_names("Intel Corporation", "Ponte Vecchio XT [Data Center GPU Max 1550]"))
        # root port -> the card's switch (upstream, downstream) -> GPU function
        up = bridge("%s:00.0" % sub_bus(busid, -2), GENERIC_SWITCH_UP, g5, [
            bridge("%s:01.0" % sub_bus(busid, -1), GENERIC_SWITCH_DOWN, g5, [dev])])
        return hostbridge([bridge("%s:01.0" % sub_bus(busid, -3), INTEL_ROOT_PORT, g5, [up])])

    def nic(busid):
        n = nic_buses.index(busid)
        return hostbridge([root_port_for(
            slingshot_nic(busid, "hsn%d" % n, "02:00:00:00:3a:%02x" % (0x10 + n), g4),
            "%s:01.0" % sub_bus(busid, -1), INTEL_ROOT_PORT)])

    packages = []
    for p in range(2):
        cores = [core(c, [c, c + 16], c % 8, SPR_L2, SPR_L1) for c in range(8 * p, 8 * p + 8)]
        dom = "%04x" % p
        io = sorted([pvc(b) for b in gpu_buses if b.startswith(dom)]
                    + [nic(b) for b in nic_buses if b.startswith(dom)],
                    key=lambda hb: parse_busid(hb.children[0].busid))
        packages.append(package(p, CPU_SPR_MAX, [
            numa(p, 503 * GIB), numa(2 + p, 64 * GIB, subtype="HBM"),
            cache("L3Cache", SPR_L3, cores, os_index=p)] + io))
    dist = ("NUMALatency", 5, [0, 1, 2, 3],
            [[10, 21, 13, 23], [21, 10, 23, 13], [13, 23, 10, 23], [23, 13, 23, 10]])
    return Topology(fx, machine("pvc-node", packages), [dist])


def omnipath_hfi(busid, ofaname, netname, guid, lid):
    """An Intel Omni-Path HFI function (class 0208): IPoIB netdev + OpenFabrics `hfi1_N`."""
    osdevs = [osdev(netname, "net", infos=[("Address", ipoib_address(guid, "80:00:00:02")),
                                           ("Port", "1")]),
              osdev(ofaname, "ofa", infos=ofa_infos(guid, guid, lid,
                                                    "fe80:0000:0000:0000:" + guid))]
    return pcidev(busid, pci_type(0x0208, 0x8086, 0x24F0, 0x8086, 0x2628, 0x11),
                  link_speed(3, 16), osdevs,
                  pci_names("Intel Corporation", "Omni-Path HFI Silicon 100 Series [discrete]"))


def fx_omnipath():
    fx = "omnipath"
    hfi = omnipath_hfi

    eth = eth_nic("0000:03:00.0", "eno1", "3c:fd:fe:a1:07:2e", (0x8086, 0x1521, 0x8086, 0x35C4, 0x01),
                  "Intel Corporation", "I350 Gigabit Network Connection", link_speed(2, 4))
    io0 = hostbridge([
        bridge("0000:00:02.2", pci_type(0x0604, 0x8086, 0x6F06, 0x8086, 0x35C4, 0x01),
               link_speed(2, 4), [eth]),
        bridge("0000:00:03.0", pci_type(0x0604, 0x8086, 0x6F08, 0x8086, 0x35C4, 0x01),
               link_speed(3, 16), [hfi("0000:05:00.0", "hfi1_0", "ib0", "0011:7501:0171:2e04",
                                       "0x2c1")])])
    io1 = hostbridge([
        bridge("0000:80:02.0", pci_type(0x0604, 0x8086, 0x6F04, 0x8086, 0x35C4, 0x01),
               link_speed(3, 16), [hfi("0000:83:00.0", "hfi1_1", "ib1", "0011:7501:0171:2e19",
                                       "0x2c2")])])
    packages = []
    for p, io in ((0, io0), (1, io1)):
        cores = [core(c, [c], c % 8, (262144, 64, 8), (32768, 64, 8)) for c in range(8 * p, 8 * p + 8)]
        packages.append(package(p, CPU_BROADWELL, [numa(p, 64 * GIB),
                                                   cache("L3Cache", (47185920, 64, 20), cores,
                                                         os_index=p), io]))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


def fx_no_gpu():
    fx = "no-gpu"
    cores = [core(c, [c], c, GEN_L2, GEN_L1) for c in range(4)]
    io = hostbridge([
        root_port_for(eth_nic("0000:01:00.0", "eno1", "3c:ec:ef:52:90:1a",
                              (0x8086, 0x1533, 0x15D9, 0x1533, 0x03), "Intel Corporation",
                              "I210 Gigabit Network Connection", link_speed(2, 1)),
                      "0000:00:1c.0", pci_type(0x0604, 0x8086, 0x7ABA, 0x15D9, 0x7ABA, 0x11)),
        root_port_for(nvme(fx, "0000:02:00.0", "nvme0n1", 937692504, "SAMSUNG MZVL2960HCJR-00B07",
                           speed=link_speed(4, 4)),
                      "0000:00:1d.0", pci_type(0x0604, 0x8086, 0x7AB0, 0x15D9, 0x7AB0, 0x11))])
    pkg = package(0, CPU_GENERIC, [numa(0, 31 * GIB), cache("L3Cache", (12582912, 64, 12), cores,
                                                             os_index=0), io])
    return Topology(fx, machine(fx, [pkg]))


def fx_drm_only():
    """A distro-hwloc export (no CUDA/NVML/RSMI/LevelZero backends, no pci.ids names)."""
    fx = "drm-only"
    g4 = link_speed(4, 16)
    io0 = [hostbridge([bridge("0000:00:1c.0", INTEL_ROOT_PORT, 0.25, [
               aspeed_bridge("0000:02:00.0", [aspeed_vga("0000:03:00.0", card=0, names=False)],
                             names=False)])]),
           hostbridge([root_port_for(nvidia_gpu(fx, "0000:17:00.0", "a100pcie", drm=(1, 128, True),
                                                cuda=False, nvml=False, names=False, speed=g4),
                                     "0000:16:01.0", INTEL_ROOT_PORT)])]
    io1 = [hostbridge([root_port_for(nvidia_gpu(fx, "0000:ca:00.0", "a100pcie", drm=(2, 129, False),
                                                cuda=False, nvml=False, names=False, speed=g4),
                                     "0000:c9:01.0", INTEL_ROOT_PORT)])]
    packages = []
    for p, io in ((0, io0), (1, io1)):
        cores = [core(c, [c, c + 16], c % 8, GEN_L2, GEN_L1) for c in range(8 * p, 8 * p + 8)]
        packages.append(package(p, CPU_GENERIC, [numa(p, 251 * GIB),
                                                 cache("L3Cache", GEN_L3, cores, os_index=p)] + io))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


def _e2e_devices(fx, p, gbus, hbus, ofa, net, last, vendor_ids):
    """Package p's GPU and HCA of the e2e fixtures, behind one host bridge. `fx` seeds the
    identities (the SNC variant reuses e2e-2gpu's, so the e2e suite expects the same UUIDs)."""
    g4 = link_speed(4, 16)
    if vendor_ids:
        gpu = nvidia_gpu(fx, gbus, "a100pcie", index=p, drm=(p + 1, 128 + p, False), speed=g4)
    else:
        gpu = nvidia_gpu(fx, gbus, "a100pcie", drm=(p + 1, 128 + p, False), cuda=False,
                         nvml=False, speed=g4)
    hca = mlx_ib_hca(hbus, net, ofa, "9c:63:c0:4d:20:%02x" % last, "0x%x" % (0x21 + p),
                     ids=(0x101B, 0x15B3, 0x0007), device_name="MT28908 Family [ConnectX-6]",
                     speed=g4)
    return hostbridge([root_port_for(gpu, "%s:01.0" % sub_bus(gbus, -1), INTEL_ROOT_PORT),
                       root_port_for(hca, "%s:02.0" % sub_bus(gbus, -1), INTEL_ROOT_PORT)])


E2E_LAYOUT = [(0, "0000:17:00.0", "0000:18:00.0", "mlx5_0", "ib0", 0x30),
              (1, "0000:65:00.0", "0000:66:00.0", "mlx5_1", "ib1", 0x31)]


def _e2e(fx, vendor_ids):
    packages = []
    for p, gbus, hbus, ofa, net, last in E2E_LAYOUT:
        io = _e2e_devices(fx, p, gbus, hbus, ofa, net, last, vendor_ids)
        packages.append(package(p, CPU_GENERIC, [numa(p, 16 * GIB), core(p, [p], 0), io]))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


def fx_e2e_2gpu():
    return _e2e("e2e-2gpu", True)


def fx_e2e_2gpu_drm():
    return _e2e("e2e-2gpu-drm", False)


def fx_e2e_1socket_2gpu():
    """coral-lassen in miniature, on this machine's CPUs 0-1: one package with two cores, and
    both GPUs and both HCAs attached to the package, so that their locality is the package and
    two tasks on two GPUs share it (bind=split gives each its own core)."""
    fx = "e2e-1socket-2gpu"
    g4 = link_speed(4, 16)
    bridges = []
    for i, (gbus, hbus, ofa, net) in enumerate([("0000:17:00.0", "0000:18:00.0", "mlx5_0", "ib0"),
                                                 ("0000:65:00.0", "0000:66:00.0", "mlx5_1", "ib1")]):
        gpu = nvidia_gpu(fx, gbus, "a100pcie", index=i, drm=(i + 1, 128 + i, False), speed=g4)
        hca = mlx_ib_hca(hbus, net, ofa, "9c:63:c0:4d:21:%02x" % (0x30 + i), "0x%x" % (0x41 + i),
                         ids=(0x101B, 0x15B3, 0x0007), device_name="MT28908 Family [ConnectX-6]",
                         speed=g4)
        bridges.append(hostbridge([root_port_for(gpu, "%s:01.0" % sub_bus(gbus, -1), INTEL_ROOT_PORT),
                                   root_port_for(hca, "%s:02.0" % sub_bus(gbus, -1), INTEL_ROOT_PORT)]))
    pkg = package(0, CPU_GENERIC, [numa(0, 32 * GIB), core(0, [0], 0), core(1, [1], 1)] + bridges)
    return Topology(fx, machine(fx, [pkg]))


def fx_e2e_4gpu():
    """The end-to-end GRES phase with four GPUs on this machine's CPUs 0-1: two packages of one
    core, two NVIDIA GPUs on each (`srun -n 2 --gpus-per-task=2 --map-by-device=gpu:ndev=auto`
    gives each task both GPUs of one package and that package's CPU)."""
    fx = "e2e-4gpu"
    g4 = link_speed(4, 16)
    packages = []
    for p, buses in ((0, ("0000:17:00.0", "0000:18:00.0")), (1, ("0000:65:00.0", "0000:66:00.0"))):
        gpus = [nvidia_gpu(fx, b, "a100pcie", index=2 * p + k, speed=g4) for k, b in enumerate(buses)]
        ports = [root_port_for(g, "%s:%02x.0" % (sub_bus(buses[0], -1), 1 + k), INTEL_ROOT_PORT)
                 for k, g in enumerate(gpus)]
        packages.append(package(p, CPU_GENERIC, [numa(p, 16 * GIB), core(p, [p], 0), hostbridge(ports)]))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


def fx_e2e_2gpu_amd():
    """The multi-node suite's node2: two AMD GPUs, no network adapter, CPUs 0-1. Two packages
    (one NUMA domain and one core each); the lower bus number is on the second package, so
    PCI-bus order is not CPU order (bus numbers follow the order in which firmware numbered
    the root complexes, not the packages)."""
    fx = "e2e-2gpu-amd"
    g4 = link_speed(4, 16)

    def mi210(busid, n):
        h = digest("amd-uuid", fx, busid)
        uuid = ("%x" % (8 + int(h[0], 16) % 8)) + h[1:16]
        osdevs = [osdev("card%d" % (n + 1), "gpu"), osdev("renderD%d" % (128 + n), "gpu"),
                  osdev("rsmi%d" % n, "gpu", "RSMI", [
                      ("Backend", "RSMI"), ("GPUVendor", "AMD"), ("GPUModel", "AMD Instinct MI210"),
                      ("AMDSerial", serial_digits(12, fx, busid)), ("AMDUUID", uuid),
                      ("RSMIVRAMSize", "67092480"), ("RSMIVisibleVRAMSize", "67092480"),
                      ("RSMIGTTSize", "263923984")])]
        return pcidev(busid, pci_type(0x0380, 0x1002, 0x740F, 0x1002, 0x0C34, 0x02), g4, osdevs,
                      pci_names("Advanced Micro Devices, Inc. [AMD/ATI]",
                                "Aldebaran/MI200 [Instinct MI210]"))

    # (package/NUMA/PU, GPU bus id, rsmi index = bus order)
    layout = [(0, "0000:c1:00.0", 1), (1, "0000:41:00.0", 0)]
    packages = []
    for k, busid, n in layout:
        io = hostbridge([root_port_for(mi210(busid, n), "%s:01.1" % sub_bus(busid, -1),
                                       AMD_GPP_BRIDGE)])
        packages.append(package(k, CPU_TURIN, [numa(k, 16 * GIB), core(k, [k], 0), io]))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=32)])


def fx_e2e_nogpu():
    """The multi-node suite's node3: no GPU; one Ethernet adapter and one NVMe disk; one
    package, two cores (CPUs 0-1)."""
    fx = "e2e-nogpu"
    cores = [core(c, [c], c, GEN_L2, GEN_L1) for c in range(2)]
    io = hostbridge([
        root_port_for(eth_nic("0000:01:00.0", "eno1", "3c:ec:ef:52:90:3c",
                              (0x8086, 0x1533, 0x15D9, 0x1533, 0x03), "Intel Corporation",
                              "I210 Gigabit Network Connection", link_speed(2, 1)),
                      "0000:00:1c.0", pci_type(0x0604, 0x8086, 0x7ABA, 0x15D9, 0x7ABA, 0x11)),
        root_port_for(nvme(fx, "0000:02:00.0", "nvme0n1", 937692504, "SAMSUNG MZVL2960HCJR-00B07",
                           speed=link_speed(4, 4)),
                      "0000:00:1d.0", pci_type(0x0604, 0x8086, 0x7AB0, 0x15D9, 0x7AB0, 0x11))])
    pkg = package(0, CPU_GENERIC, [numa(0, 15 * GIB), cache("L3Cache", (12582912, 64, 12), cores,
                                                             os_index=0), io])
    return Topology(fx, machine(fx, [pkg]))


def fx_e2e_snc_2gpu():
    """e2e-2gpu's devices (same identities) on ONE package split into two sub-NUMA clusters
    (Intel SNC): each has its own NUMA node, one core and a GPU and an HCA. A device's
    locality is one CPU while its package holds two, so bind=package is above the locality
    (tests/e2e/run.sh). Written to tests/e2e/fixtures/: the end-to-end suite's alone."""
    fx = "e2e-snc-2gpu"
    clusters = [group([numa(p, 8 * GIB), core(p, [p], p),
                       _e2e_devices("e2e-2gpu", p, gbus, hbus, ofa, net, last, True)])
                for p, gbus, hbus, ofa, net, last in E2E_LAYOUT]
    pkg = package(0, CPU_GENERIC, clusters)
    return Topology(fx, machine(fx, [pkg]), [numa_latency([[0, 1]], near=12)], out_dir=E2E_FIXTURE_DIR)


def fx_synthetic_64gpu():
    fx = "synthetic-64gpu"
    g5 = link_speed(5, 16)
    packages = []
    for p in range(4):
        groups = []
        for k in range(4 * p, 4 * p + 4):
            l3s = [cache("L3Cache", ZEN5_L3, [core(c, [c], c % 64) for c in range(16 * k + 8 * j,
                                                                            16 * k + 8 * j + 8)],
                         os_index=2 * k + j) for j in range(2)]
            ports = []
            for i in range(4):
                n = 4 * k + i
                busid = "0000:%02x:00.0" % (16 * k + 1 + i)
                ports.append(root_port_for(nvidia_gpu(fx, busid, "h100", index=n, speed=g5),
                                           "0000:%02x:%02x.1" % (16 * k, 1 + i)))
            # Two InfiniBand HCAs per NUMA group, on their own root ports: the planner's
            # benchmark pairs every GPU with one (ties at the host bridge, split in bus order).
            for j in range(2):
                n = 2 * k + j
                busid = "0000:%02x:00.0" % (16 * k + 5 + j)
                hca = mlx_ib_hca(busid, "ib%d" % n, "mlx5_%d" % n, "9c:63:c0:64:%02x:%02x" % (k, j),
                                 "0x%x" % (0x100 + n), speed=g5)
                ports.append(root_port_for(hca, "0000:%02x:%02x.1" % (16 * k, 5 + j)))
            groups.append(group([numa(k, 96 * GIB)] + l3s + [hostbridge(ports)]))
        packages.append(package(p, CPU_TURIN, groups))
    return Topology(fx, machine(fx, packages),
                    [numa_latency([range(4 * p, 4 * p + 4) for p in range(4)])], compact_facts=True)


def fx_far_hca():
    """GPUs on one socket, InfiniBand HCAs on the other, the management port beside the GPUs."""
    fx = "far-hca"
    g4 = link_speed(4, 16)
    eth = eth_nic("0000:03:00.0", "eno1", "3c:ec:ef:7a:21:40", (0x8086, 0x1533, 0x15D9, 0x1533, 0x03),
                  "Intel Corporation", "I210 Gigabit Network Connection", link_speed(2, 1))
    io0 = [_two_gpu_complex(fx, 0x10, 0, model="a100pcie"),
           hostbridge([root_port_for(eth, "0000:00:1c.0", INTEL_ROOT_PORT)])]
    hcas = [mlx_ib_hca("0000:%02x:00.0" % bus, "ib%d" % n, "mlx5_%d" % n, "9c:63:c0:7a:21:%02x" % n,
                       "0x%x" % (0x31 + n), ids=(0x101B, 0x15B3, 0x0007),
                       device_name="MT28908 Family [ConnectX-6]", speed=g4)
            for n, bus in enumerate((0x98, 0x99))]
    io1 = [hostbridge([root_port_for(h, "0000:97:%02x.0" % (1 + n), INTEL_ROOT_PORT)
                       for n, h in enumerate(hcas)])]
    packages = []
    for p, io in ((0, io0), (1, io1)):
        cores = [core(c, [c], c % 8, GEN_L2, GEN_L1) for c in range(8 * p, 8 * p + 8)]
        packages.append(package(p, CPU_GENERIC, [numa(p, 128 * GIB),
                                                 cache("L3Cache", GEN_L3, cores, os_index=p)] + io))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


def fx_gpu_omnipath():
    """Per package a PCIe switch holding one GPU and one Omni-Path HFI (PSM3_NIC pairing)."""
    fx = "gpu-omnipath"
    g3 = link_speed(3, 16)
    eth = eth_nic("0000:02:00.0", "eno1", "3c:fd:fe:b4:19:20", (0x8086, 0x1521, 0x8086, 0x35C4, 0x01),
                  "Intel Corporation", "I350 Gigabit Network Connection", link_speed(2, 4))
    io = {0: [hostbridge([root_port_for(eth, "0000:00:1c.0", INTEL_ROOT_PORT)])], 1: []}
    for p, top in ((0, 0x00), (1, 0x80)):
        up = top + 4
        gpu = nvidia_gpu(fx, "0000:%02x:00.0" % (up + 2), "a100pcie", index=p, speed=g3)
        hfi = omnipath_hfi("0000:%02x:00.0" % (up + 3), "hfi1_%d" % p, "ib%d" % p,
                           "0011:7501:0172:%02x10" % p, "0x%x" % (0x3c1 + p))
        io[p].append(hostbridge([bridge("0000:%02x:03.0" % top, INTEL_ROOT_PORT, g3, [
            bridge("0000:%02x:00.0" % up, PLX_SWITCH, g3, [
                bridge("0000:%02x:08.0" % (up + 1), PLX_SWITCH, g3, [gpu]),
                bridge("0000:%02x:10.0" % (up + 1), PLX_SWITCH, g3, [hfi])])])]))
    packages = []
    for p in range(2):
        cores = [core(c, [c], c % 8, GEN_L2, GEN_L1) for c in range(8 * p, 8 * p + 8)]
        packages.append(package(p, CPU_GENERIC, [numa(p, 128 * GIB),
                                                 cache("L3Cache", GEN_L3, cores, os_index=p)] + io[p]))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


# DGX-2 PCIe quads, per host bridge: (root port bus, [lower switch upstream bus, ...]); the
# lower switch holds two V100s and, between them, one InfiniBand HCA.
DGX2_QUADS = [(0, 0x2B, [0x32, 0x37]), (0, 0x4E, [0x55, 0x5A]),
              (1, 0xAE, [0xB5, 0xBA]), (1, 0xD7, [0xDE, 0xE3])]


def fx_dgx2_mlx5():
    """The DGX-2's PCIe tree (the hwloc export nvidiaDGX2.xml) with the HCAs it leaves out."""
    fx = "dgx2-mlx5"
    g3 = link_speed(3, 16)
    gpu_buses = sorted(low + d for _, _, lows in DGX2_QUADS for low in lows for d in (2, 4))
    hca_buses = sorted(low + 3 for _, _, lows in DGX2_QUADS for low in lows)
    b = lambda bus, rest: "0000:%02x:%s" % (bus, rest)
    io = {0: [], 1: []}
    for pkg, root, lows in DGX2_QUADS:
        lower = []
        for k, low in enumerate(lows):
            gpus = [nvidia_gpu(fx, b(low + d, "00.0"), "v100sxm3", index=gpu_buses.index(low + d),
                               speed=g3) for d in (2, 4)]
            n = hca_buses.index(low + 3)
            hca = mlx_ib_hca(b(low + 3, "00.0"), "ib%d" % n, "mlx5_%d" % n,
                             "9c:63:c0:d2:02:%02x" % n, "0x%x" % (0x41 + n),
                             ids=(0x1017, 0x15B3, 0x0007), device_name="MT27800 Family [ConnectX-5]",
                             speed=g3)
            lower.append(bridge(b(root + 2, "%02x.0" % (4 + 8 * k)), PLX_SWITCH, g3, [
                bridge(b(low, "00.0"), PLX_SWITCH, g3, [
                    bridge(b(low + 1, "00.0"), PLX_SWITCH, g3, [gpus[0]]),
                    bridge(b(low + 1, "08.0"), PLX_SWITCH, g3, [hca]),
                    bridge(b(low + 1, "10.0"), PLX_SWITCH, g3, [gpus[1]])])]))
        io[pkg].append(hostbridge([bridge(b(root, "00.0"), INTEL_SKX_ROOT_PORT, g3, [
            bridge(b(root + 1, "00.0"), PLX_SWITCH, g3, lower)])]))
    eth = eth_nic("0000:86:00.0", "enp134s0f0", "3c:ec:ef:d2:02:10",
                  (0x8086, 0x1563, 0x8086, 0x0001, 0x01), "Intel Corporation",
                  "Ethernet Controller 10G X550T", link_speed(3, 4))
    io[1].insert(0, hostbridge([root_port_for(eth, "0000:85:00.0", INTEL_SKX_ROOT_PORT)]))
    packages = []
    for p in range(2):
        cores = [core(c, [c, c + 48], c % 24, GEN_L2, GEN_L1) for c in range(24 * p, 24 * p + 24)]
        packages.append(package(p, CPU_SKYLAKE, [numa(p, 768 * GIB),
                                                 cache("L3Cache", GEN_L3, cores, os_index=p)] + io[p]))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], near=10, far=21)])


# --- Issue 36: fabric adapters told apart, Slingshot, namespaces --------------------------

CPU_MI300A = [("CPUVendor", "AuthenticAMD"), ("CPUFamilyNumber", "25"), ("CPUModelNumber", "144"),
              ("CPUModel", "AMD Instinct MI300A Accelerator"), ("CPUStepping", "1")]
CPU_POWER9 = [("CPUModel", "POWER9, altivec supported"), ("CPURevision", "2.2 (pvr 004e 1202)")]
CPU_GENOA_X = [("CPUVendor", "AuthenticAMD"), ("CPUFamilyNumber", "25"), ("CPUModelNumber", "17"),
               ("CPUModel", "AMD EPYC 9V33X 96-Core Processor"), ("CPUStepping", "2")]


def slingshot_cxi(busid, netname, cxiname, mac, nid, speed, subtype=True):
    """A Cassini 1 function as hwloc 2.14 and later show it: the Ethernet interface (`hsnN`,
    subtype Slingshot) and the CXI device (`cxiN`, Network, subtype Slingshot, with the
    `CassiniVersion` and `NID` infos of hwloc's cxi class); `cxiname=None`: as hwloc 2.9 to
    2.13 show it, the interface alone (subtype Slingshot when /sys shows its cxi class)."""
    osdevs = [osdev(netname, "net", "Slingshot" if subtype else None, [("Address", mac)])]
    if cxiname:
        osdevs.append(osdev(cxiname, "net", "Slingshot", [("CassiniVersion", "1.1"), ("NID", nid)]))
    return pcidev(busid, pci_type(0x0200, 0x17DB, 0x0501, 0x17DB, 0x0000, 0x02), speed, osdevs,
                  pci_names("Cray Inc", "Cassini 1 [Slingshot 200Gb]"))


def mi300a(fx, busid, n):
    """One MI300A APU in SPX mode: one `rsmiN` (class 1200, processing accelerator)."""
    h = digest("amd-uuid", fx, busid)
    uuid = ("%x" % (8 + int(h[0], 16) % 8)) + h[1:16]
    osdevs = [osdev("rsmi%d" % n, "gpu", "RSMI", [
        ("Backend", "RSMI"), ("GPUVendor", "AMD"), ("GPUModel", "AMD Instinct MI300A"),
        ("AMDSerial", serial_digits(12, fx, busid)), ("AMDUUID", uuid),
        ("RSMIVRAMSize", "536870912"), ("RSMIVisibleVRAMSize", "536870912")])]
    return pcidev(busid, pci_type(0x1200, 0x1002, 0x74A0, 0x1002, 0x74A0, 0x00), link_speed(5, 16),
                  osdevs, pci_names("Advanced Micro Devices, Inc. [AMD/ATI]",
                                    "Aqua Vanjaram [Instinct MI300A]"))


def i210_mgmt(busid, netname, mac):
    return eth_nic(busid, netname, mac, (0x8086, 0x1537, 0xFFFF, 0x0000, 0x03), "Intel Corporation",
                   "I210 Gigabit Backplane Connection", link_speed(1, 1))


def _apu_node(fx, napus, cores_per_apu, cxi, netprefix):
    """El Capitan's node shape (HPE Cray EX255a): one MI300A per package, each package its
    own PCI domain with a host bridge holding the APU and a Slingshot NIC on root ports of
    their own; a 1 GbE management port on package 0 at bus 81, between hsi0 (0000:01) and
    hsi1 (0001:01) in bus order."""
    packages = []
    for k in range(napus):
        dom = "%04x" % k
        nic = slingshot_cxi("%s:01:00.0" % dom, "%s%d" % (netprefix, k), "cxi%d" % k if cxi else None,
                            "02:00:00:00:%02x:%02x" % (0x36, 0x10 + k), "0x%x" % (0x1a40 + k),
                            link_speed(4, 16))
        ports = [root_port_for(nic, "%s:00:01.1" % dom, AMD_GPP_BRIDGE),
                 root_port_for(mi300a(fx, "%s:02:00.0" % dom, k), "%s:00:07.1" % dom, AMD_GPP_BRIDGE)]
        io = [hostbridge(ports)]
        if k == 0:
            io.append(hostbridge([root_port_for(i210_mgmt("0000:81:00.0", "enp129s0", "00:40:a6:89:36:20"),
                                                "0000:80:01.1", AMD_GPP_BRIDGE_X1)]))
        base = k * cores_per_apu
        cores = [core(c, [c], c, ZEN3_L2, ZEN3_L1) for c in range(base, base + cores_per_apu)]
        packages.append(package(k, CPU_MI300A, [numa(k, 128 * GIB),
                                                cache("L3Cache", ZEN3_L3, cores, os_index=k)] + io))
    return packages


def fx_apu_slingshot():
    """4 MI300A APUs, one Slingshot NIC each as hwloc 2.9 to 2.13 show it (hsiN, subtype
    Slingshot), and the management port between them in bus order."""
    fx = "apu-slingshot"
    packages = _apu_node(fx, 4, 4, False, "hsi")
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1], [2], [3]], far=32)])


def fx_apu_slingshot_cxi():
    """The same node as hwloc 2.14 and later show it: hsnN beside the CXI device cxiN."""
    fx = "apu-slingshot-cxi"
    packages = _apu_node(fx, 4, 4, True, "hsn")
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1], [2], [3]], far=32)])


def fx_e2e_slingshot():
    """The end-to-end suite's Slingshot node, on this machine's CPUs 0-1: two APUs (one core
    each) with their Slingshot NIC (hsnN + cxiN), and the management port between them in bus
    order. Written to tests/e2e/fixtures/: the end-to-end suite's alone."""
    fx = "e2e-slingshot"
    packages = _apu_node(fx, 2, 1, True, "hsn")
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [1]], far=32)],
                    out_dir=E2E_FIXTURE_DIR)


def fx_rails_2socket():
    """Summit's node shape (IBM AC922): per socket one dual-port EDR ConnectX-5 (two functions,
    two rails: mlx5_0/mlx5_1 on socket 0, mlx5_2/mlx5_3 on socket 1) and two V100s, and a
    dual-port Broadcom Ethernet card on socket 0 in PCI domain 0005, between the rails of
    domains 0003 and 0033 in bus order."""
    fx = "rails-2socket"
    edr = link_speed(4, 8)
    p9_root = pci_type(0x0604, 0x1014, 0x04C1, 0x1014, 0x0000, 0x00)

    def rail(busid, n):
        return mlx_ib_hca(busid, "ib%d" % n, "mlx5_%d" % n, "98:03:9b:%02x:%02x:%02x" % (0x5a, 0x10, n),
                          "0x%x" % (0x31a7 + n), ids=(0x1019, 0x1014, 0x0617),
                          device_name="MT28800 Family [ConnectX-5 Ex]", speed=edr)

    def eth(busid, n):
        return eth_nic(busid, "enP5p1s0f%d" % n, "70:e2:84:14:%02x:%02x" % (0x5b, n),
                       (0x14E4, 0x1657, 0x14E4, 0x1981, 0x01), "Broadcom Inc. and subsidiaries",
                       "NetXtreme BCM5719 Gigabit Ethernet PCIe", link_speed(2, 4))

    def gpu_bridge(dom, n):
        g = nvidia_gpu(fx, "%s:01:00.0" % dom, "v100sxm3", index=n, cuda=False)
        return hostbridge([root_port_for(g, "%s:00:00.0" % dom, p9_root)])

    io0 = [hostbridge([bridge("0003:00:00.0", p9_root, edr, [rail("0003:01:00.0", 0),
                                                              rail("0003:01:00.1", 1)])]),
           gpu_bridge("0004", 0), gpu_bridge("0006", 1),
           hostbridge([bridge("0005:00:00.0", p9_root, link_speed(2, 4), [eth("0005:01:00.0", 0),
                                                                          eth("0005:01:00.1", 1)])])]
    io1 = [hostbridge([bridge("0033:00:00.0", p9_root, edr, [rail("0033:01:00.0", 2),
                                                              rail("0033:01:00.1", 3)])]),
           gpu_bridge("0035", 2), gpu_bridge("0036", 3)]
    packages = []
    for p, io in ((0, io0), (1, io1)):
        cores = [core(c, [c], c, (524288, 128, 8), (32768, 128, 32)) for c in range(4 * p, 4 * p + 4)]
        packages.append(package(8 * p, CPU_POWER9, [numa(8 * p, 256 * GIB),
                                                     cache("L3Cache", (10485760, 128, 20), cores,
                                                           os_index=p)] + io))
    return Topology(fx, machine(fx, packages), [numa_latency([[0], [8]], near=10, far=40)])


def fx_vm_ib_vf():
    """An Azure HBv4-like VM (Hyper-V PCI domains, no bridges): an NDR InfiniBand virtual
    function (mlx5_ib0, 15b3:101e, class 0207: LID and GID) and the accelerated-networking
    Ethernet VF of the same vendor (mlx5_an0 + eth1, 15b3:101a, class 0200: Port1LID 0x0 and
    no GID: no RDMA), and an NVMe disk."""
    fx = "vm-ib-vf"
    ib_guid = "0015:5dff:fe33:1a0d"
    ib = pcidev("0101:00:00.0", pci_type(0x0207, 0x15B3, 0x101E, 0x15B3, 0x0123, 0x00), 0.0, [
        osdev("ib0", "net", infos=[("Address", ipoib_address(ib_guid, "00:00:01:27")), ("Port", "1")]),
        osdev("mlx5_ib0", "ofa", infos=ofa_infos(ib_guid, "946d:ae03:008d:1a06", "0x17c",
                                                 "fe80:0000:0000:0000:" + ib_guid))],
        pci_names("Mellanox Technologies", "ConnectX Family mlx5Gen Virtual Function"))
    an_mac = "60:45:bd:45:1a:87"
    an = pcidev("8f23:00:02.0", pci_type(0x0200, 0x15B3, 0x101A, 0x15B3, 0x0127, 0x80), 0.0, [
        osdev("eth1", "net", infos=[("Address", an_mac), ("Port", "1")]),
        osdev("mlx5_an0", "ofa", infos=[("NodeGUID", guid_from_mac(an_mac)),
                                        ("SysImageGUID", "0000:0000:0000:0000"), ("Port1State", "4"),
                                        ("Port1LID", "0x0"), ("Port1LMC", "0")])],
        pci_names("Mellanox Technologies", "MT28800 Family [ConnectX-5 Ex Virtual Function]"))
    disk = nvme(fx, "4d31:00:00.0", "nvme0n1", 1875374424, "Microsoft NVMe Direct Disk",
                ids=(0x1414, 0xB111, 0x1414, 0xFFFF, 0x00), speed=link_speed(3, 4))
    cores = [core(c, [c], c, ZEN3_L2, ZEN3_L1) for c in range(4)]
    pkg = package(0, CPU_GENOA_X, [numa(0, 180 * GIB), cache("L3Cache", (100663296, 64, 16), cores,
                                                              os_index=0),
                                   hostbridge([ib]), hostbridge([disk]), hostbridge([an])])
    return Topology(fx, machine(fx, [pkg]))


def nvme_namespaces(fx, busid, drive, nsids, size_kib):
    """An NVMe drive's function with one block OS device per namespace, in the order given
    (real exports list them in directory order, nvme1n2 before nvme1n1)."""
    base = nvme(fx, busid, "nvme%dn%d" % (drive, nsids[0]), size_kib, "SAMSUNG MZWLR7T6HALA-00007",
                major_minor="259:%d" % (4 * drive), speed=link_speed(4, 4))
    for k, ns in enumerate(nsids[1:], 1):
        blk = osdev("nvme%dn%d" % (drive, ns), "block", "Disk", [
            ("Size", str(size_kib)), ("SectorSize", "512"), ("LinuxDeviceID", "259:%d" % (4 * drive + k)),
            ("Vendor", "Samsung"), ("Model", "SAMSUNG MZWLR7T6HALA-00007"), ("Revision", "MPK92B5Q"),
            ("SerialNumber", "S7" + digest("nvme", fx, busid)[:12].upper())])
        base.children.append(blk)
    return base


def fx_nvme_namespaces():
    """Two NVMe drives with two namespaces each (drive 1 lists nvme1n2 first, as elcap's
    export does), and a SATA controller holding a DVD drive (sr0) and a disk (sda)."""
    fx = "nvme-namespaces"
    sata = pcidev("0000:05:00.0", pci_type(0x0106, 0x8086, 0x7AE2, 0x15D9, 0x7AE2, 0x11), link_speed(3, 1), [
        osdev("sr0", "block", "Removable Media Device", [
            ("Size", "1048575"), ("SectorSize", "2048"), ("LinuxDeviceID", "11:0"), ("Vendor", "HL-DT-ST"),
            ("Model", "DVD+_-RW_GTA0N"), ("Revision", "A3C0"), ("SerialNumber", "KZPH7A" + digest("sr0", fx)[:6])]),
        osdev("sda", "block", "Disk", [
            ("Size", "976762584"), ("SectorSize", "512"), ("LinuxDeviceID", "8:0"),
            ("Model", "ST1000NM0008-2F2100"), ("Revision", "SN04"), ("SerialNumber", "ZFL" + digest("sda", fx)[:5])])],
        pci_names("Intel Corporation", "Alder Lake-S PCH SATA Controller [AHCI Mode]"))
    io = hostbridge([
        root_port_for(nvme_namespaces(fx, "0000:02:00.0", 0, (1, 2), 3750738264), "0000:00:1a.0",
                      pci_type(0x0604, 0x8086, 0x7AC8, 0x15D9, 0x7AC8, 0x11)),
        root_port_for(nvme_namespaces(fx, "0000:03:00.0", 1, (2, 1), 3750738264), "0000:00:1b.0",
                      pci_type(0x0604, 0x8086, 0x7AC0, 0x15D9, 0x7AC0, 0x11)),
        root_port_for(sata, "0000:00:1c.0", pci_type(0x0604, 0x8086, 0x7AB8, 0x15D9, 0x7AB8, 0x11))])
    cores = [core(c, [c], c, GEN_L2, GEN_L1) for c in range(4)]
    pkg = package(0, CPU_GENERIC, [numa(0, 63 * GIB), cache("L3Cache", (12582912, 64, 12), cores,
                                                             os_index=0), io])
    return Topology(fx, machine(fx, [pkg]))


FIXTURES = [fx_turin_h200, fx_uneven_3plus1, fx_degenerate_one_complex, fx_degenerate_machine,
            fx_amd_mi250x, fx_intel_pvc, fx_omnipath, fx_no_gpu, fx_drm_only, fx_e2e_2gpu,
            fx_e2e_2gpu_drm, fx_e2e_1socket_2gpu, fx_e2e_2gpu_amd, fx_e2e_nogpu, fx_e2e_snc_2gpu,
            fx_synthetic_64gpu, fx_far_hca, fx_dgx2_mlx5, fx_gpu_omnipath, fx_e2e_4gpu,
            fx_apu_slingshot, fx_apu_slingshot_cxi, fx_e2e_slingshot, fx_rails_2socket, fx_vm_ib_vf,
            fx_nvme_namespaces]


# ---------------------------------------------------------------------------------------
# Facts (README tables) and checks
# ---------------------------------------------------------------------------------------


def locality_text(obj):
    """The nearest non-I/O ancestor, with the NUMA nodes of its nodeset."""
    nodes = "NUMA " + ",".join(map(str, sorted(obj.nodeset)))
    if obj.type == "Machine":
        return "Machine (%s)" % nodes
    if obj.type == "Package":
        return "Package P#%d (%s)" % (obj.os_index, nodes)
    return "%s L#%d (%s)" % (obj.type.replace("Cache", ""), obj.logical, nodes)


def identity_text(dev):
    parts = []
    for o in dev.walk():
        if o.type != "OSDev":
            continue
        for key in ("NVIDIAUUID", "AMDUUID"):
            if o.info(key):
                parts.append("%s=%s" % (key, o.info(key)))
        if o.info("LevelZeroDriverDeviceIndex") is not None:
            parts.append("ze %s.%s LevelZeroUUID=%s" % (o.info("LevelZeroDriverIndex"),
                                                       o.info("LevelZeroDriverDeviceIndex"),
                                                       o.info("LevelZeroUUID")))
        if o.info("NodeGUID"):
            parts.append("%s NodeGUID=%s" % (o.name, o.info("NodeGUID")))
        if o.props[0][1] == OSDEV_TYPES["net"] and o.info("Address"):
            parts.append("%s %s" % (o.name, o.info("Address")))
    return "; ".join(parts) if parts else "–"


def osdev_text(dev):
    out = []
    for o in dev.walk():
        if o.type == "OSDev":
            kind = OSDEV_KIND_NAMES[o.props[0][1]]
            out.append("%s (%s%s)" % (o.name, kind, "/" + o.subtype if o.subtype else ""))
    return ", ".join(out)


def compact_rows(topo):
    """One row per locality object (for fixtures with many identical devices)."""
    rows = []
    by_anc = {}
    for d in topo.devices():
        by_anc.setdefault(id(d.non_io_ancestor()), []).append(d)
    for devs in by_anc.values():
        anc = devs[0].non_io_ancestor()
        classes = sorted({" ".join(d.pci_type.split()[:2]) for d in devs})
        names = [o.name for d in devs for o in d.walk() if o.type == "OSDev"]
        ids = {o.info("NVIDIAUUID") for d in devs for o in d.walk() if o.info("NVIDIAUUID")}
        rows.append("| %s … %s (%d) | %s | %s | %d distinct NVIDIAUUIDs | %s | %s |" % (
            devs[0].busid, devs[-1].busid, len(devs), ", ".join(classes), " ".join(names),
            len(ids), locality_text(anc), pulist(anc.cpuset)))
    return rows


def facts_table(topo):
    rows = ["| bus id | class [vendor:device] | OS devices | identity | locality | PUs |",
            "|---|---|---|---|---|---|"]
    if topo.compact_facts:
        return "\n".join(rows + compact_rows(topo))
    for d in topo.devices():
        anc = d.non_io_ancestor()
        cls = d.pci_type.split()[0] + " " + d.pci_type.split()[1]
        rows.append("| %s | %s | %s | %s | %s | %s |" % (
            d.busid, cls, osdev_text(d), identity_text(d), locality_text(anc), pulist(anc.cpuset)))
    return "\n".join(rows)


def facts_block(topo):
    return "<!-- facts:%s (generated by gen/generate.py --facts; do not edit) -->\n%s\n<!-- /facts:%s -->" % (
        topo.name, facts_table(topo), topo.name)


def build_all():
    return [f() for f in FIXTURES]


def write_all(topos):
    for t in topos:
        path = t.path
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(render(t))
        print("wrote", os.path.relpath(path, os.getcwd()))


def run(cmd, env=None):
    e = dict(os.environ)
    e.pop("HWLOC_XMLFILE", None)
    e.pop("HWLOC_COMPONENTS", None)
    if env:
        e.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, env=e)


def check(topos):
    problems = []
    for tool in ("lstopo-no-graphics", "hwloc-calc"):
        if not shutil.which(tool):
            print("error: %s not found (install hwloc; Debian: hwloc-nox)" % tool, file=sys.stderr)
            print("0 passed, 1 failed")
            return 1
    readme = open(README, encoding="utf-8").read() if os.path.exists(README) else ""
    failed = 0
    for t in topos:
        before = len(problems)
        path = t.path
        want = render(t)
        if not os.path.exists(path):
            problems.append("%s: missing (run generate.py)" % t.filename)
            failed += 1
            continue
        if open(path, encoding="utf-8").read() != want:
            problems.append("%s: differs from the generator output (run generate.py)" % t.filename)
        if render(t) != want:
            problems.append("%s: generator output is not deterministic" % t.filename)
        # plain load (as users run it), then with import warnings and hwloc's internal
        # consistency checks (plain lstopo silently accepts inconsistent cpusets or duplicate
        # gp_index values; HWLOC_DEBUG_CHECK aborts on them), with libxml2 and with hwloc's
        # minimal parser (what builds without libxml2 use).
        strict = {"HWLOC_XML_VERBOSE": "1", "HWLOC_DEBUG_CHECK": "1"}
        for env in (None, dict(strict, HWLOC_LIBXML_IMPORT="1"),
                    dict(strict, HWLOC_LIBXML_IMPORT="0")):
            r = run(["lstopo-no-graphics", "-i", path, "--whole-io"], env)
            if r.returncode != 0 or r.stderr:
                problems.append("%s: lstopo rc=%d env=%s stderr=%r" % (t.filename, r.returncode,
                                                                       env, r.stderr[:500]))
        # every OS device's locality as hwloc computes it == the one recorded here
        for d in t.devices():
            want_pus = d.non_io_ancestor().cpuset
            for o in d.walk():
                if o.type != "OSDev":
                    continue
                r = run(["hwloc-calc", "-i", path, "--po", "-I", "pu", "os=" + o.name])
                got = {int(x) for x in r.stdout.strip().split(",") if x}
                if r.returncode != 0 or r.stderr or got != want_pus:
                    problems.append("%s: os=%s locality %s, expected %s (rc=%d %s)" % (
                        t.filename, o.name, pulist(got), pulist(want_pus), r.returncode,
                        r.stderr.strip()[:200]))
        if facts_block(t) not in readme:
            problems.append("README.md: device table of %s missing or stale "
                            "(paste `generate.py --facts`)" % t.name)
        ok = len(problems) == before
        failed += 0 if ok else 1
        print("%-5s %-28s %3d PUs, %2d devices" % ("ok" if ok else "FAIL", t.filename,
                                                   len(t.root.cpuset), len(t.devices())))
    for p in problems:
        print("FAIL", p, file=sys.stderr)
    # The suite convention of scripts/test-all.sh: the last line counts the fixtures.
    print("%d passed, %d failed" % (len(topos) - failed, failed))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="verify instead of writing")
    g.add_argument("--facts", action="store_true", help="print README device tables")
    args = ap.parse_args()
    topos = build_all()
    if args.check:
        return check(topos)
    if args.facts:
        for t in topos:
            print("### %s\n\n%s\n" % (t.filename, facts_block(t)))
        return 0
    write_all(topos)
    return 0


if __name__ == "__main__":
    sys.exit(main())
