#!/usr/bin/env python3
"""The planner against PRRTE's own `--map-by device=` (issue 37), on lstopo XMLs.

    tests/prrte/compare.py CLI [XML...]

CLI is the `map-by-device` binary; each XML is planned by it (`plan --json`) and mapped by
PRRTE (`prterun ... --display map --rtos donotlaunch`, HWLOC_XMLFILE=XML), for every case of
TRANSLATION below (the one table from PRRTE's grammar to the plugin's), and each rank's
devices (by PCI bus id) and CPUs (PU numbers) are compared, refusals with refusals. Then,
for the VAR_CASES, a real PRRTE launch with `--bind-to none` prints what each rank is told
(VARIABLES), compared with the planner's variables for the same spec.

Every difference must be a row of the table "Where the plugin and PRRTE differ" in
docs/prrte.md (its Matches column), and every row must match at least one difference: a
difference no row explains fails, and so does a row that no longer differs. Prints one line
per failure, the totals (`N agree, N differ as documented`), PRRTE's version, and the
closing `N passed, N failed` (scripts/test-all.sh's convention; a case is one count).
"""

import concurrent.futures
import fnmatch
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "prrte.md"

# The translation from PRRTE's grammar to the plugin's, one row per form both express:
# (label, PRRTE --map-by, plugin spec, tasks, --bind-to levels). {c} is the device class
# (gpu, network, block), {name} the name of the class's first device (PCI bus order), {n} the
# number of devices of the class that the planner counts. PRRTE's --bind-to LEVEL is the
# plugin's bind=LEVEL (BIND).
TRANSLATION = [
    ("class", "device={c}", "{c}", "{n}", ["core", "l3cache", "numa", "package", "none"]),
    ("interleave", "device={c}:interleave", "{c}:interleave", "{n}", ["core"]),
    ("interleave=numa", "device={c}:interleave=numa", "{c}:interleave=numa", "{n}", ["core"]),
    ("shared", "device={c}:shared", "{c}:shared", "2*{n}", ["core"]),
    ("ndev=2", "device={c}:ndev=2", "{c}:ndev=2", "{n}//2", ["core", "package"]),
    ("ppr", "ppr:2:device={c}", "{c}:ppr=2", "2*{n}", ["core"]),
    ("pe=2", "device={c}:pe=2", "{c}:pe=2", "{n}", ["core"]),
    ("more-tasks", "device={c}", "{c}", "{n}+1", ["core"]),
    ("named", "device={name}", "{name}", "1", ["core"]),
    ("named-2", "device={name}", "{name}", "2", ["core"]),
]
BIND = {level: f"bind={level}" for level in ["core", "l3cache", "numa", "package", "none"]}
CLASSES = ["gpu", "network", "block"]
# The real launch (--bind-to none) that shows each rank's variables: these rows, per class.
VAR_CASES = ["class", "ndev=2"]
VARIABLES = ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "ZE_FLAT_DEVICE_HIERARCHY",
             "NCCL_IB_HCA", "UCX_NET_DEVICES", "PSM3_NIC"]
# The Level Zero hierarchy model PRRTE states beside ZE_AFFINITY_MASK (it writes
# ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE); the plugin needs it said (`ze_hierarchy`, the CLI's
# --ze-hierarchy). Intel GPU cases run twice: without it (the plugin refuses: a documented
# row) and with this model, where both sides can be compared.
ZE_MODEL = "COMPOSITE"
UNSET = "(unset)"
TIMEOUT = 120


def run(cmd, env=None):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT, check=False)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {TIMEOUT} s"


class Topology:
    """What the comparison needs of an XML: each OS device's PCI bus id (its name where it has
    no PCI function, as the plan's JSON has no bus id for it either), and the PUs of each
    core (or PU) by logical index (hwloc's logical indexes follow the XML's tree order)."""

    def __init__(self, path):
        self.path = path
        self.busid = {}
        self.pus_of = {"core": [], "hwt": [], "pu": []}
        tree = ET.parse(path).getroot()
        self._walk(tree, None)
        self.pus_of["hwt"] = self.pus_of["pu"]

    def _walk(self, elem, pci):
        kind = elem.get("type")
        if kind == "PCIDev":
            pci = elem.get("pci_busid")
        elif kind == "OSDev" and pci is not None and elem.get("name"):
            self.busid.setdefault(elem.get("name"), pci)
        elif kind == "Core":
            self.pus_of["core"].append(
                sorted(int(pu.get("os_index")) for pu in elem.iter("object") if pu.get("type") == "PU"))
        elif kind == "PU":
            self.pus_of["pu"].append([int(elem.get("os_index"))])
        for child in elem:
            if child.tag == "object":
                self._walk(child, pci)

    def cpus(self, bound):
        """PRRTE's `Bound:` text (`package[0][core:L16-19],package[1][core:L64]`, `N/A`) as
        a sorted PU list, or None (not bound)."""
        if bound == "N/A":
            return None
        pus = set()
        for kind, ranges in re.findall(r"\[(core|hwt|pu):L([0-9,\-]+)\]", bound):
            for part in ranges.split(","):
                lo, _, hi = part.partition("-")
                for i in range(int(lo), int(hi or lo) + 1):
                    pus.update(self.pus_of[kind][i])
        return sorted(pus)


def cpulist(text):
    if text is None:
        return None
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def plan(cli, xml, spec, ntasks, extra=()):
    rc, out, err = run([cli, "plan", "--topology", str(xml), *extra, "-n", str(ntasks), "--json", spec])
    if rc != 0:
        return {"refused": err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"}
    data = json.loads(out)
    return {"ranks": [
        {"devices": [d["busid"] for d in t["devices"]], "names": [d["name"] for d in t["devices"]], "cpus": cpulist(t["cpus"]),
         "env": {v: t["env"].get(v, UNSET) for v in VARIABLES}}
        for t in data["tasks"]]}


def keyed(topo, result):
    """The plan with each device as PRRTE's side has it: the PCI bus id of its OS device in
    the XML (a SATA disk's is its controller's, which the plan does not give), else its name."""
    for rank in result.get("ranks", []):
        rank["devices"] = [topo.busid.get(n, b or n) for n, b in zip(rank["names"], rank["devices"])]
    return result


def prrte_env(xml):
    env = dict(os.environ, HWLOC_XMLFILE=str(xml), HWLOC_THISSYSTEM="1")
    for v in VARIABLES:
        env.pop(v, None)
    return env


PRRTE = ["prterun", "--allow-run-as-root", "--host", "localhost:4096"]
RANK = re.compile(r"Process rank: (\d+) Bound: (\S+)(?: Device: (\S+))?")


def prrte_map(topo, mapby, bind, ntasks):
    rc, out, err = run(PRRTE + ["-n", str(ntasks), "--map-by", mapby, "--bind-to", bind, "--display", "map",
                                "--rtos", "donotlaunch", "true"], env=prrte_env(topo.path))
    ranks = {}
    for m in RANK.finditer(out):
        names = m.group(3).split(",") if m.group(3) else []
        ranks[int(m.group(1))] = {"devices": [topo.busid.get(n, n) for n in names], "cpus": topo.cpus(m.group(2))}
    if rc != 0 or len(ranks) != ntasks:
        text = (err + out).strip().splitlines()
        return {"refused": text[0] if text else f"exit {rc}"}
    return {"ranks": [ranks[i] for i in range(ntasks)]}


def prrte_vars(topo, mapby, ntasks):
    shell = 'printf "@@ %s' + "".join(f" {v}=%s" for v in VARIABLES) + '\\n" "$PMIX_RANK"' + "".join(
        f' "${{{v}-{UNSET}}}"' for v in VARIABLES)
    rc, out, err = run(PRRTE + ["-n", str(ntasks), "--map-by", mapby, "--bind-to", "none", "sh", "-c", shell],
                       env=prrte_env(topo.path))
    ranks = {}
    for line in out.splitlines():
        if line.startswith("@@ "):
            fields = line.split()
            ranks[int(fields[1])] = dict(f.split("=", 1) for f in fields[2:])
    if rc != 0 or len(ranks) != ntasks:
        text = (err + out).strip().splitlines()
        return {"refused": text[0] if text else f"exit {rc}"}
    return {"ranks": [{"env": ranks[i]} for i in range(ntasks)]}


def difference(mine, theirs, what):
    """The first way the plugin's result differs from PRRTE's (a diff kind and a detail), or
    None where they agree."""
    if "refused" in mine or "refused" in theirs:
        if "refused" in mine and "refused" in theirs:
            return None
        if "refused" in mine:
            return "refusal-plugin", f"plugin: {mine['refused']}"
        return "refusal-prrte", f"PRRTE: {theirs['refused']}"
    for i, (a, b) in enumerate(zip(mine["ranks"], theirs["ranks"])):
        for key in what:
            va = a["env"].get(key) if key in VARIABLES else a[key]
            vb = b["env"].get(key) if key in VARIABLES else b[key]
            if va != vb:
                kind = f"var:{key}" if key in VARIABLES else key
                return kind, f"rank {i} {key}: plugin {short(va)}, PRRTE {short(vb)}"
    return None


def short(v):
    if isinstance(v, list) and v and isinstance(v[0], int):
        return ",".join(map(str, v)) if len(v) <= 8 else f"{len(v)} PUs from {v[0]}"
    return str(v)


class Row:
    """A row of docs/prrte.md's differences table: its title and its Matches column's
    `key=glob` pairs (fixture, map, bind, diff), all of which must match."""

    def __init__(self, title, matches):
        self.title = title
        self.matches = matches
        self.used = 0

    def match(self, case):
        return all(fnmatch.fnmatchcase(case[k], glob) for k, glob in self.matches)


# What a row of the table may match on: the fixture's file name, the form (TRANSLATION's
# label), PRRTE's --map-by, its
# --bind-to (`none (launch)` for the variables), the kind of difference (devices, cpus,
# refusal-plugin, refusal-prrte, var:NAME), and whether the fixture has devices of the class
# that the plugin holds back (held=yes|no: `map-by-device devices` says which and why), and
# the Level Zero model given to the plugin (ze=COMPOSITE, or empty: none).
KEYS = ("fixture", "form", "map", "bind", "diff", "held", "ze")


def read_rows():
    rows = []
    section = False
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = line.strip() == "## Where the plugin and PRRTE differ"
            continue
        if not section or not line.startswith("|") or line.startswith("|-") or line.startswith("| Case"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        keys = re.findall(r"`([^`]*)`", cells[-1])
        for key in keys:
            pairs = [tuple(p.split("=", 1)) for p in key.split()]
            bad = [p for p in pairs if len(p) != 2 or p[0] not in KEYS]
            if bad or not pairs:
                sys.exit(f"{DOC}: row '{cells[0]}': Matches `{key}` is not key=glob pairs of {', '.join(KEYS)}")
            rows.append(Row(cells[0], pairs))
    if not rows:
        sys.exit(f"{DOC}: no table under '## Where the plugin and PRRTE differ'")
    return rows


def cases_of(cli, xml):
    """Every (fixture, label, map, spec, bind, ntasks, vars) this XML is compared on."""
    out = []
    for c in CLASSES:
        rc, data, err = run([cli, "devices", "--topology", str(xml), "--class", c, "--json"])
        # A topology the plugin lists no device of (an export without I/O objects, which it
        # refuses) is still compared: every spec then meets the plugin's refusal.
        devices = json.loads(data)["devices"] if rc == 0 else []
        given = [d for d in devices if "held_back" not in d]
        n = len(given)
        name = given[0]["name"] if given else None
        held = "yes" if len(given) < len(devices) else "no"
        models = [""] + ([ZE_MODEL] if any(d["vendor"] == "intel" for d in given if c == "gpu") else [])
        for label, mapby, spec, count, binds in TRANSLATION:
            if "{name}" in mapby and name is None:
                continue
            ntasks = max(1, eval(count.format(n=max(n, 1)), {}))  # noqa: S307 (the table's own arithmetic)
            base = {"fixture": xml.name, "xml": xml, "form": label, "map": mapby.format(c=c, name=name),
                    "n": ntasks, "held": held}
            spec = spec.format(c=c, name=name)
            for ze in models:
                extra = ["--ze-hierarchy", ze] if ze else []
                for bind in binds:
                    out.append(dict(base, spec=f"{spec}:{BIND[bind]}", bind=bind, vars=False, ze=ze, extra=extra))
                if label in VAR_CASES:
                    out.append(dict(base, spec=f"{spec}:bind=none", bind="none (launch)", vars=True, ze=ze,
                                    extra=extra))
    return out


def compare(cli, topo, case):
    """[(case, difference or None)]: one for a mapping, one per variable for a launch (or one
    where only one side refused)."""
    mine = keyed(topo, plan(cli, case["xml"], case["spec"], case["n"], case["extra"]))
    if not case["vars"]:
        theirs = prrte_map(topo, case["map"], case["bind"], case["n"])
        return [(case, difference(mine, theirs, ["devices", "cpus"]))]
    theirs = prrte_vars(topo, case["map"], case["n"])
    if "refused" in mine or "refused" in theirs:
        return [(case, difference(mine, theirs, []))]
    return [(dict(case, var=v), difference(mine, theirs, [v])) for v in VARIABLES]


# Controls: mistranslations that must be seen as differences (of this kind), so that a
# comparison that could not tell two plans apart fails instead of agreeing with everything.
# (fixture, PRRTE --map-by, --bind-to, plugin spec, tasks, expected difference)
CONTROLS = [
    ("turin-h200.xml", "device=gpu", "core", "gpu:interleave:bind=core", 2, "devices"),
    ("turin-h200.xml", "device=gpu", "core", "gpu:bind=numa", 2, "cpus"),
    ("turin-h200.xml", "device=gpu:shared", "core", "gpu:bind=core", 5, "refusal-plugin"),
    ("turin-h200.xml", "device=gpu", "core", "gpu:shared:bind=core", 5, "refusal-prrte"),
]


def controls(cli, topos):
    """The CONTROLS that did not come out as expected, as failure lines."""
    bad = []
    for name, mapby, bind, spec, ntasks, want in CONTROLS:
        xml = next((x for x in topos if x.name == name and x.parent.name == "topologies"), None)
        if xml is None:
            bad.append(f"control {name}: not among the topologies compared")
            continue
        mine = keyed(topos[xml], plan(cli, xml, spec, ntasks))
        theirs = prrte_map(topos[xml], mapby, bind, ntasks)
        got = difference(mine, theirs, ["devices", "cpus"])
        if (got[0] if got else None) != want:
            bad.append(f"control {name} -n {ntasks} --map-by {mapby} --bind-to {bind} against {spec}: "
                       f"expected a {want} difference, got {got}")
    return bad


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cli = sys.argv[1]
    xmls = [Path(x) for x in sys.argv[2:]]
    rows = read_rows()
    rc, out, _ = run(["prterun", "--version"])
    version = next((line for line in out.splitlines() if line.strip()), f"prterun --version: exit {rc}")
    topos = {x: Topology(x) for x in xmls}
    cases = [case for x in xmls for case in cases_of(cli, x)]
    workers = max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = [r for rs in pool.map(lambda case: compare(cli, topos[case["xml"]], case), cases) for r in rs]
    agree = documented = failed = 0
    bad_controls = controls(cli, topos)
    for line in bad_controls:
        failed += 1
        print(f"FAIL: {line}")
    for case, diff in results:
        if diff is None:
            agree += 1
            continue
        kind, detail = diff
        key = dict(case, diff=kind)
        row = next((r for r in rows if r.match(key)), None)
        where = f"{case['fixture']} -n {case['n']} --map-by {case['map']} --bind-to {case['bind']} ({' '.join(case['extra'] + [case['spec']])})"
        if "var" in case:
            where += f" {case['var']}"
        if row is None:
            failed += 1
            print(f"FAIL: {where}: {kind} differs and no row of {DOC.name} says why: {detail}")
        else:
            row.used += 1
            documented += 1
            if os.environ.get("PRRTE_VERBOSE"):
                print(f"documented ({row.title}): {where}: {detail}")
    names = [x.name for x in xmls]
    for row in rows:
        keys = " ".join(f"{k}={g}" for k, g in row.matches)
        fixtures = [g for k, g in row.matches if k == "fixture"]
        if row.used == 0 and fixtures and not fnmatch.filter(names, fixtures[0]):
            # A row of a real export (../shared/topologies) where that directory is absent.
            print(f"skipped: row '{row.title}' (`{keys}`): no topology here is {fixtures[0]}")
        elif row.used == 0:
            failed += 1
            print(f"FAIL: row '{row.title}' (`{keys}`) of {DOC.name} no longer differs: remove it")
        else:
            print(f"row '{row.title}' (`{keys}`): {row.used} cases")
    print(f"{version}; {len(xmls)} topologies, {len(cases)} runs, {len(results)} comparisons, "
          f"{len(CONTROLS)} controls (mistranslations that must differ)")
    print(f"{agree} agree, {documented} differ as documented, {failed} failures")
    print(f"{agree + documented + len(CONTROLS) - len(bad_controls)} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
