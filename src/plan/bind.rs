//! Which CPUs each task gets: the task's locality is the common ancestor of its devices'
//! localities; a binding object strictly larger than it is refused (the bind ceiling); finer
//! bindings come from the devices' own localities, first free unit in order, never outside
//! the step's CPUs.

use super::assign::common_ancestor;
use super::{PlanError, StepFacts};
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
        BindLevel::Locality | BindLevel::None => return None,
    })
}

/// Hands out CPUs: per-unit use counts so that tasks sharing a locality get distinct units
/// (first free, in logical order) and a second round starts over from the least used.
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
    per_task: usize,
    allowed: CpuSet,
    regions: HashMap<Vec<usize>, Region>,
}

/// Where one group of devices may be bound.
#[derive(Clone)]
enum Region {
    /// Always these CPUs (`None`: leave the mask alone).
    Fixed(Option<CpuSet>),
    /// Pick from these units (indexes into `Binder::units`), least used first.
    Units(Vec<usize>),
}

impl<'a> Binder<'a> {
    pub(super) fn new(
        topo: &'a Topology,
        level: BindLevel,
        spec: &Spec,
        facts: &StepFacts,
        allowed: CpuSet,
    ) -> Binder<'a> {
        let pe = spec.pe.or(match level {
            BindLevel::Core | BindLevel::HwThread => facts.cpus_per_task,
            _ => None,
        });
        let level_objs: Vec<&CpuSet> =
            bind_kind(level).map_or(Vec::new(), |k| topo.of_kind(k).map(|o| &o.cpuset).collect());
        let unit_kind = match (pe, level) {
            (Some(_), _) if spec.hwtcpus => Some(ObjKind::Pu),
            (Some(_), BindLevel::HwThread) => Some(ObjKind::Pu),
            (Some(_), _) => Some(ObjKind::Core),
            (None, l) => bind_kind(l),
        };
        let mut units: Vec<&CpuSet> = unit_kind.map_or(Vec::new(), |k| topo.of_kind(k).map(|o| &o.cpuset).collect());
        if units.is_empty() && unit_kind == Some(ObjKind::Core) {
            // A topology without Core objects: hardware threads are the CPUs.
            units = topo.of_kind(ObjKind::Pu).map(|o| &o.cpuset).collect();
        }
        let uses = vec![0; units.len()];
        let coarse = !matches!(level, BindLevel::Core | BindLevel::HwThread | BindLevel::Locality | BindLevel::None);
        Binder {
            topo,
            level,
            units,
            level_objs,
            units_are_level: pe.is_none(),
            widen: pe.is_some() && coarse,
            uses,
            per_task: pe.unwrap_or(1) as usize,
            allowed,
            regions: HashMap::new(),
        }
    }

    /// Where a task holding `devs` may be bound: a fixed CPU set, or the units to pick from
    /// (in device order). Checks the allocation and the bind ceiling.
    fn region(&self, devices: &[Device], devs: &[usize]) -> Result<Region, PlanError> {
        let own: Vec<&Device> = devs.iter().filter_map(|&i| devices.get(i)).collect();
        let Some(first) = own.first() else { return Ok(Region::Fixed(None)) };
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
                return Ok(Region::Fixed(Some(obj.intersection(&self.allowed))));
            }
        }
        if self.level == BindLevel::Locality {
            return Ok(Region::Fixed(Some(locality.intersection(&self.allowed))));
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
        Ok(Region::Units(candidates))
    }

    pub(super) fn bind_task(&mut self, devices: &[Device], devs: &[usize]) -> Result<Option<CpuSet>, PlanError> {
        if self.level == BindLevel::None {
            return Ok(None);
        }
        // Tasks with the same devices have the same region: work it out once per group.
        let region = match self.regions.get(devs) {
            Some(r) => r.clone(),
            None => {
                let r = self.region(devices, devs)?;
                self.regions.insert(devs.to_vec(), r.clone());
                r
            }
        };
        let candidates = match region {
            Region::Fixed(cpus) => return Ok(cpus),
            Region::Units(candidates) => candidates,
        };
        let mut order: Vec<(u32, usize, usize)> =
            candidates.iter().enumerate().map(|(pos, &i)| (self.uses[i], pos, i)).collect();
        order.sort_unstable();
        let mut cpus = CpuSet::new();
        for &(_, _, i) in order.iter().take(self.per_task) {
            self.uses[i] += 1;
            cpus = cpus.union(self.units[i]);
        }
        // pe picks cores or threads; a coarser bind level widens to the objects holding them.
        if self.widen {
            cpus = self.level_objs.iter().filter(|o| o.intersects(&cpus)).fold(CpuSet::new(), |acc, o| acc.union(o));
        }
        Ok(Some(cpus.intersection(&self.allowed)))
    }
}
