//! Which CPUs each task gets: the task's locality is the common ancestor of its devices'
//! localities; a binding object strictly larger than it is refused (the bind ceiling); finer
//! bindings come from the devices' own localities, first free unit in order, never outside
//! the step's CPUs.

use super::assign::common_ancestor;
use super::facts::StepFacts;
use super::types::PlanError;
use crate::cpuset::CpuSet;
use crate::device::Device;
use crate::spec::{BindLevel, Spec};
use crate::topology::{ObjKind, Topology};
use std::collections::HashMap;

fn bind_kind(level: BindLevel) -> Option<ObjKind> {
    Some(match level {
        BindLevel::HwThread => ObjKind::Pu,
        BindLevel::Core => ObjKind::Core,
        BindLevel::L1Cache => ObjKind::L1Cache,
        BindLevel::L2Cache => ObjKind::L2Cache,
        BindLevel::L3Cache => ObjKind::L3Cache,
        BindLevel::Numa => ObjKind::NumaNode,
        BindLevel::Package => ObjKind::Package,
        BindLevel::Locality | BindLevel::Split | BindLevel::None => return None,
    })
}

/// Hands out CPUs: per-unit use counts so that tasks sharing a locality get distinct units
/// (first free, in logical order). A unit holds as many tasks as it has cores (hardware
/// threads with `hwtcpus`): one for a core or a thread, eight for an 8-core L3; a task that
/// would go beyond is refused unless `overload` (seed 000: `shared` is about devices, never a
/// licence to stack tasks on CPUs). A fixed region (the locality itself) is counted the same
/// way, as one unit.
pub(super) struct Binder<'a> {
    topo: &'a Topology,
    level: BindLevel,
    /// Units of the binding level (or cores/PUs for `pe`), in logical order.
    units: Vec<&'a CpuSet>,
    /// Objects of the binding level, for the ceiling and for widening `pe` picks.
    level_objs: Vec<&'a CpuSet>,
    /// The units are the level's own objects (no `pe`): one object per task.
    units_are_level: bool,
    /// `pe` picked cores/threads under a coarser level: widen to the level's objects.
    widen: bool,
    uses: Vec<u32>,
    /// How many tasks each unit can hold.
    capacity: Vec<u32>,
    per_task: usize,
    /// Where `per_task` came from, for messages (`pe=4`, `--cpus-per-task=4`, and on a node
    /// with several threads per core `--cpus-per-task=8 CPUs, that is 4`).
    per_task_from: String,
    /// `--cpus-per-task`: no task is bound to fewer CPUs ([`Binder::bind_task`]).
    asked: Option<u32>,
    /// `pe=` as the job wrote it, for the fix of a binding smaller than `--cpus-per-task`.
    pe: Option<u32>,
    /// The step's CPUs per unit of `pe`: its threads per core, or 1 where `pe` counts threads.
    per_core: u32,
    /// What the units are, for messages (`cores`, `hardware threads`, `l3cache objects`).
    unit_word: &'static str,
    hwtcpus: bool,
    overload: bool,
    allowed: CpuSet,
    regions: HashMap<Vec<usize>, Region>,
    /// Tasks bound to each fixed region so far, and how many it holds.
    fixed_uses: HashMap<CpuSet, (u32, u32)>,
    /// `bind=split`: each task's share, by task (from [`Binder::prepare`]).
    shares: HashMap<u32, CpuSet>,
    /// What the plan should say about the binding (cores a split leaves to no task).
    pub(super) warnings: Vec<String>,
}

/// Where one group of devices may be bound.
#[derive(Clone)]
enum Region {
    /// Always these CPUs (`None`: leave the mask alone), and the device names for messages.
    Fixed(Option<CpuSet>, String),
    /// Pick from these units (indexes into `Binder::units`), least used first; the device
    /// names and the locality's CPUs, for messages.
    Units(Vec<usize>, String, CpuSet),
}

impl<'a> Binder<'a> {
    pub(super) fn new(
        topo: &'a Topology,
        level: BindLevel,
        spec: &Spec,
        facts: &StepFacts,
        allowed: CpuSet,
    ) -> Binder<'a> {
        let asked = facts.cpus_per_task.filter(|n| *n > 0);
        // --cpus-per-task counts CPUs (Slurm's unit); pe counts cores unless hardware threads
        // are the units: N CPUs are N divided by the step's threads per core, rounded up.
        let threads = spec.hwtcpus || level == BindLevel::HwThread;
        let per_core = if threads { 1 } else { threads_per_core(topo, &allowed) };
        let from_facts = match level {
            BindLevel::Core | BindLevel::HwThread => asked.map(|n| n.div_ceil(per_core)),
            _ => None,
        };
        let pe = spec.pe.or(from_facts);
        // pe=N says how many cores each task gets: under bind=split (the default's spelling)
        // that is a per-core binding, each task its own first free N (never an equal share
        // that ignores N).
        let level = if pe.is_some() && level == BindLevel::Split { BindLevel::Core } else { level };
        let per_task_from = match (spec.pe, from_facts) {
            (Some(n), _) => format!("pe={n}"),
            (None, Some(n)) if per_core > 1 => format!("--cpus-per-task={} CPUs, that is {n}", asked.unwrap_or(n)),
            (None, Some(n)) => format!("--cpus-per-task={n}"),
            (None, None) => "one".to_string(),
        };
        let level_objs: Vec<&CpuSet> =
            bind_kind(level).map_or(Vec::new(), |k| topo.of_kind(k).map(|o| &o.cpuset).collect());
        let unit_kind = match (pe, level) {
            (Some(_), _) if spec.hwtcpus => Some(ObjKind::Pu),
            (Some(_), BindLevel::HwThread) => Some(ObjKind::Pu),
            (Some(_), _) => Some(ObjKind::Core),
            (None, l) => bind_kind(l),
        };
        let mut units: Vec<&CpuSet> = unit_kind.map_or(Vec::new(), |k| topo.of_kind(k).map(|o| &o.cpuset).collect());
        let mut unit_word = match unit_kind {
            Some(ObjKind::Pu) => "hardware threads",
            Some(ObjKind::Core) => "cores",
            _ => "binding objects",
        };
        if units.is_empty() && unit_kind == Some(ObjKind::Core) {
            // A topology without Core objects: hardware threads are the CPUs.
            units = topo.of_kind(ObjKind::Pu).map(|o| &o.cpuset).collect();
            unit_word = "hardware threads";
        }
        let hwtcpus = spec.hwtcpus || level == BindLevel::HwThread;
        // A core or a thread holds one task; a coarser object as many as its cores that hold
        // the step's CPUs (the region a task bound to it gets).
        let capacity = match unit_kind {
            Some(ObjKind::Core | ObjKind::Pu) => vec![1; units.len()],
            _ => units.iter().map(|u| cores_in(topo, &u.intersection(&allowed), hwtcpus)).collect(),
        };
        let coarse = !matches!(level, BindLevel::Core | BindLevel::HwThread | BindLevel::Locality | BindLevel::None);
        Binder {
            topo,
            level,
            uses: vec![0; units.len()],
            units,
            level_objs,
            units_are_level: pe.is_none(),
            widen: pe.is_some() && coarse,
            capacity,
            per_task: pe.unwrap_or(1) as usize,
            per_task_from,
            asked,
            pe: spec.pe,
            per_core,
            unit_word,
            hwtcpus,
            overload: spec.overload,
            allowed,
            regions: HashMap::new(),
            fixed_uses: HashMap::new(),
            shares: HashMap::new(),
            warnings: Vec::new(),
        }
    }

    /// Before the first task: with `bind=split` (and no `overload`), works out every task's
    /// share of the CPUs near its devices ([`split_shares`]).
    pub(super) fn prepare(&mut self, devices: &[Device], assignment: &[Vec<usize>]) -> Result<(), PlanError> {
        if self.level != BindLevel::Split || self.overload {
            return Ok(());
        }
        let mut regions: Vec<SplitRegion> = Vec::new();
        for (t, devs) in assignment.iter().enumerate() {
            if let Region::Fixed(Some(cpus), device) = self.region_of(devices, devs)? {
                match regions.iter_mut().find(|r| r.cpus == cpus) {
                    Some(r) => r.tasks.push(t as u32),
                    None => regions.push(SplitRegion { cpus, device, tasks: vec![t as u32] }),
                }
            }
        }
        self.shares = split_shares(self.topo, &regions, self.hwtcpus, &mut self.warnings)?;
        Ok(())
    }

    /// The region of a group of devices, worked out once per group.
    fn region_of(&mut self, devices: &[Device], devs: &[usize]) -> Result<Region, PlanError> {
        if let Some(r) = self.regions.get(devs) {
            return Ok(r.clone());
        }
        let r = self.region(devices, devs)?;
        self.regions.insert(devs.to_vec(), r.clone());
        Ok(r)
    }

    /// Where a task holding `devs` may be bound: a fixed CPU set, or the units to pick from
    /// (in device order). Checks the allocation and the bind ceiling.
    fn region(&self, devices: &[Device], devs: &[usize]) -> Result<Region, PlanError> {
        let own: Vec<&Device> = devs.iter().filter_map(|&i| devices.get(i)).collect();
        let Some(first) = own.first() else { return Ok(Region::Fixed(None, String::new())) };
        let union = own.iter().fold(CpuSet::new(), |acc, d| acc.union(&d.locality));
        let locality = if own.len() == 1 {
            first.locality.clone()
        } else {
            self.topo.objects[common_ancestor(self.topo, &union)].cpuset.clone()
        };
        let names = || own.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join("+");
        if !locality.intersects(&self.allowed) {
            return Err(PlanError::OutsideAllocation {
                device: names(),
                locality_cpus: locality.to_list(),
                allowed: self.allowed.to_list(),
            });
        }
        // The bind ceiling: an object of the level that strictly contains the locality.
        if let Some(obj) = self.level_objs.iter().find(|o| locality.is_subset(o)) {
            if obj.is_strict_superset(&locality) {
                return Err(PlanError::BindAboveLocality {
                    level: self.level,
                    device: names(),
                    locality_cpus: locality.to_list(),
                    object_cpus: obj.to_list(),
                });
            }
            if self.units_are_level {
                // The level object is the locality itself (bind=numa on a NUMA-local GPU).
                return Ok(Region::Fixed(Some(obj.intersection(&self.allowed)), names()));
            }
        }
        if self.level == BindLevel::Locality && self.units_are_level {
            return Ok(Region::Fixed(Some(locality.intersection(&self.allowed)), names()));
        }
        if self.level == BindLevel::Split {
            // The CPUs next to the task's devices: their own localities, not all of the
            // ancestor that holds them (seed 001: a finer binding comes from the devices'
            // own localities, never from a part of the ancestor near neither).
            let near = union.intersection(&self.allowed);
            if near.is_empty() {
                return Err(PlanError::OutsideAllocation {
                    device: names(),
                    locality_cpus: union.to_list(),
                    allowed: self.allowed.to_list(),
                });
            }
            return Ok(Region::Fixed(Some(near), names()));
        }
        // Finer bindings come from the devices' own localities, in device order.
        let mut taken = vec![false; self.units.len()];
        let mut candidates: Vec<usize> = Vec::new();
        for d in &own {
            for (i, u) in self.units.iter().enumerate() {
                // Inside the device's locality, or holding it without leaving the task's.
                let near = u.is_subset(&d.locality) || (d.locality.is_subset(u) && u.is_subset(&locality));
                if near && !taken[i] && u.intersects(&self.allowed) {
                    taken[i] = true;
                    candidates.push(i);
                }
            }
        }
        if candidates.is_empty() {
            return Err(PlanError::NoBindObject {
                level: self.level,
                device: names(),
                locality_cpus: locality.to_list(),
                allowed: self.allowed.to_list(),
            });
        }
        Ok(Region::Units(candidates, names(), locality))
    }

    /// Task `task`'s CPUs: `None` leaves its mask alone. Never fewer than the
    /// `--cpus-per-task` Slurm gave the task: that is refused, with the ways to give it more
    /// (seed 000: never silently give less than asked).
    pub(super) fn bind_task(
        &mut self,
        task: u32,
        devices: &[Device],
        devs: &[usize],
    ) -> Result<Option<CpuSet>, PlanError> {
        let cpus = self.bind_task_unchecked(task, devices, devs)?;
        match (&cpus, self.asked) {
            (Some(set), Some(asked)) if set.len() < asked as usize => {
                let device = devs.iter().filter_map(|&i| devices.get(i)).map(|d| d.name.as_str()).collect::<Vec<_>>();
                let needed = asked.div_ceil(self.per_core);
                // Raising pe helps only where the CPUs near the task's devices hold them.
                let near = devs
                    .iter()
                    .filter_map(|&i| devices.get(i))
                    .fold(CpuSet::new(), |acc, d| acc.union(&d.locality))
                    .intersection(&self.allowed);
                let pe_fix = match self.pe {
                    Some(pe) if pe < needed && near.len() >= asked as usize => {
                        format!("raise pe={pe} to {needed} or drop it (--cpus-per-task then sizes the binding); else ")
                    }
                    _ => String::new(),
                };
                Err(PlanError::FewerCpusThanAsked {
                    task,
                    have: set.len(),
                    cpus: set.to_list(),
                    device: device.join("+"),
                    asked,
                    pe_fix,
                })
            }
            _ => Ok(cpus),
        }
    }

    /// [`Binder::bind_task`] before the `--cpus-per-task` check.
    fn bind_task_unchecked(
        &mut self,
        task: u32,
        devices: &[Device],
        devs: &[usize],
    ) -> Result<Option<CpuSet>, PlanError> {
        if self.level == BindLevel::None {
            return Ok(None);
        }
        // Tasks with the same devices have the same region: work it out once per group.
        let region = self.region_of(devices, devs)?;
        let (candidates, device, locality) = match region {
            Region::Fixed(None, _) => return Ok(None),
            Region::Fixed(Some(cpus), device) => return self.take_fixed(task, cpus, device),
            Region::Units(candidates, device, locality) => (candidates, device, locality),
        };
        if candidates.len() < self.per_task {
            return Err(PlanError::PeTooLarge {
                task,
                want: self.per_task_from.clone(),
                unit: self.unit_word,
                have: candidates.len(),
                device,
                locality_cpus: locality.intersection(&self.allowed).to_list(),
            });
        }
        // A unit that is also a whole region some task was bound to (a task whose devices
        // share one NUMA domain, beside one whose devices span two) counts those tasks too.
        let used = |i: usize| self.uses[i] + self.fixed_uses_of(self.units[i]);
        let mut order: Vec<(u32, usize, usize)> =
            candidates.iter().enumerate().map(|(pos, &i)| (used(i), pos, i)).collect();
        order.sort_unstable();
        let picked: Vec<usize> = order.iter().take(self.per_task).map(|&(_, _, i)| i).collect();
        if !self.overload && picked.iter().any(|&i| used(i) >= self.capacity[i]) {
            return Err(PlanError::Overloaded {
                task,
                unit: counted(self.unit_word, candidates.len()),
                have: candidates.len(),
                device,
                locality_cpus: locality.intersection(&self.allowed).to_list(),
            });
        }
        let mut cpus = CpuSet::new();
        for i in picked {
            self.uses[i] += 1;
            cpus = cpus.union(self.units[i]);
        }
        // pe picks cores or threads; a coarser bind level widens to the objects holding them,
        // bind=locality to the locality (the picked cores still count against it).
        if self.widen {
            cpus = self.level_objs.iter().filter(|o| o.intersects(&cpus)).fold(CpuSet::new(), |acc, o| acc.union(o));
        } else if self.level == BindLevel::Locality {
            cpus = locality;
        }
        let cpus = cpus.intersection(&self.allowed);
        if cpus.is_empty() {
            // A level this topology does not have (bind=l1cache:pe=2 where hwloc recorded no
            // L1 caches): never an empty mask, which the kernel refuses at the task's start.
            let own: Vec<&Device> = devs.iter().filter_map(|&i| devices.get(i)).collect();
            return Err(PlanError::NoBindObject {
                level: self.level,
                device: own.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join("+"),
                locality_cpus: own.iter().fold(CpuSet::new(), |acc, d| acc.union(&d.locality)).to_list(),
                allowed: self.allowed.to_list(),
            });
        }
        Ok(Some(cpus))
    }

    /// How many tasks were bound to `unit`'s CPUs in the step as a whole region.
    fn fixed_uses_of(&self, unit: &CpuSet) -> u32 {
        self.fixed_uses.get(&unit.intersection(&self.allowed)).map_or(0, |u| u.0)
    }

    /// A task bound to a whole region (its locality, or the level object that is it): the
    /// region holds as many tasks as it has cores. With `bind=split` and several tasks on
    /// the region, the task gets its share instead.
    fn take_fixed(&mut self, task: u32, cpus: CpuSet, device: String) -> Result<Option<CpuSet>, PlanError> {
        if let Some(share) = self.shares.get(&task) {
            return Ok(Some(share.intersection(&self.allowed)));
        }
        let (topo, hwtcpus) = (self.topo, self.hwtcpus);
        // Tasks given the same CPUs as a unit (the other path, above) count against it too.
        let unit_uses: u32 = (0..self.units.len())
            .filter(|&i| self.units[i].intersection(&self.allowed) == cpus)
            .map(|i| self.uses[i])
            .sum();
        let (uses, capacity) =
            self.fixed_uses.entry(cpus.clone()).or_insert_with(|| (0, cores_in(topo, &cpus, hwtcpus)));
        let capacity = *capacity;
        if !self.overload && *uses + unit_uses >= capacity {
            return Err(PlanError::Overloaded {
                task,
                unit: counted(if self.hwtcpus { "hardware threads" } else { "cores" }, capacity as usize),
                have: capacity as usize,
                device,
                locality_cpus: cpus.to_list(),
            });
        }
        *uses += 1;
        Ok(Some(cpus))
    }
}

/// The CPUs near one group of devices (its region under `bind=split`) and the tasks placed
/// on it, in task order.
struct SplitRegion {
    cpus: CpuSet,
    device: String,
    tasks: Vec<u32>,
}

/// `bind=split`: every task's share. The cores (threads with `hwtcpus`) of the regions are
/// grouped by which regions hold them; each group is cut, in logical order, into equal runs
/// for the tasks of those regions, in task order, and a task's share is its run of every
/// group it is in. Regions that are the same or apart give each task an equal share of its
/// own; regions that overlap (a task whose `ndev` devices span two localities, one of them
/// another task's) share out only the CPUs they have in common, so no two tasks' CPUs
/// overlap. Cores that do not fill a run are left to no task, and the plan says so.
fn split_shares(
    topo: &Topology,
    regions: &[SplitRegion],
    hwtcpus: bool,
    warnings: &mut Vec<String>,
) -> Result<HashMap<u32, CpuSet>, PlanError> {
    let (kind, unit) = if hwtcpus { (ObjKind::Pu, "hardware threads") } else { (ObjKind::Core, "cores") };
    let mut cores: Vec<&CpuSet> = topo.of_kind(kind).map(|o| &o.cpuset).collect();
    if cores.is_empty() {
        cores = topo.of_kind(ObjKind::Pu).map(|o| &o.cpuset).collect();
    }
    // Groups of cores by the regions that hold them, in the order first met.
    let mut groups: Vec<(Vec<usize>, Vec<&CpuSet>)> = Vec::new();
    for core in cores {
        // A core holding only some of the step's threads still counts as one.
        let holders: Vec<usize> = (0..regions.len()).filter(|&r| regions[r].cpus.intersects(core)).collect();
        if holders.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(h, _)| *h == holders) {
            Some((_, c)) => c.push(core),
            None => groups.push((holders, vec![core])),
        }
    }
    let mut shares: HashMap<u32, CpuSet> = HashMap::new();
    for (holders, cores) in groups {
        let mut tasks: Vec<u32> = holders.iter().flat_map(|&r| regions[r].tasks.iter().copied()).collect();
        tasks.sort_unstable();
        let device = &regions[holders[0]].device;
        let within = holders.iter().fold(CpuSet::new(), |a, &r| a.union(&regions[r].cpus));
        let members = tasks.len();
        let size = cores.len() / members;
        if size == 0 {
            let cpus = cores.iter().fold(CpuSet::new(), |a, c| a.union(c)).intersection(&within);
            return Err(PlanError::SplitTooMany {
                tasks: u32::try_from(members).unwrap_or(u32::MAX),
                device: device.clone(),
                unit: counted(unit, cores.len()),
                have: cores.len(),
                locality_cpus: cpus.to_list(),
            });
        }
        if members > 1 && cores.len() % members != 0 {
            let left: CpuSet = cores[size * members..].iter().fold(CpuSet::new(), |a, c| a.union(c));
            warnings.push(format!(
                "{members} tasks share the locality of {device} ({} {unit}): each gets {size}, and CPUs {left} are \
                 left to no task",
                cores.len()
            ));
        }
        for (k, task) in tasks.into_iter().enumerate() {
            let run = cores[k * size..(k + 1) * size].iter().fold(CpuSet::new(), |a, c| a.union(c));
            let share = shares.entry(task).or_default();
            *share = share.union(&run.intersection(&within));
        }
    }
    Ok(shares)
}

/// `cores` for a count of one is `core`.
fn counted(plural: &'static str, n: usize) -> &'static str {
    match (n, plural) {
        (1, "cores") => "core",
        (1, "hardware threads") => "hardware thread",
        (1, "binding objects") => "binding object",
        _ => plural,
    }
}

/// How many of `allowed` one core holds at most: the step's threads per core, which turns
/// Slurm's `--cpus-per-task` (CPUs) into cores. 1 on a topology without cores, or when the
/// step holds one thread of each core.
fn threads_per_core(topo: &Topology, allowed: &CpuSet) -> u32 {
    let most = topo.of_kind(ObjKind::Core).map(|c| c.cpuset.intersection(allowed).len()).max().unwrap_or(1);
    u32::try_from(most.max(1)).unwrap_or(1)
}

/// How many tasks `cpus` (CPUs of the step) can run: the cores (hardware threads with
/// `hwtcpus`) that hold any of them, at least one. A core the step holds only some threads of
/// counts as one, as in a `bind=split` share.
fn cores_in(topo: &Topology, cpus: &CpuSet, hwtcpus: bool) -> u32 {
    let kind = if hwtcpus { ObjKind::Pu } else { ObjKind::Core };
    let n = topo.of_kind(kind).filter(|o| o.cpuset.intersects(cpus)).count();
    let n = if n == 0 { cpus.len() } else { n };
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}
