//! map-by-device: place each task of a Slurm step against its own device (GPU, network
//! adapter, disk), bind it to the CPUs next to that device, and name the device in the
//! variables its runtime reads.
//!
//! Data flows one way (see `docs/ARCHITECTURE.md`):
//! spec text -> [`spec::Spec`]; hwloc -> [`topology::Topology`] ([`load`], the only module
//! that touches hwloc) -> [`node::Node`] (devices from [`enumerate`]); (spec, node, step
//! facts) -> [`plan::Plan`] -> per task a CPU set and an environment ([`env`]). Nothing in
//! this crate touches Slurm; the SPANK plugin in `spank/` is a thin caller.

// Tests may unwrap: a panic there is a failed test, not a crashed slurmstepd.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod affinity;
pub mod bounded;
pub mod cache;
pub mod check;
pub mod config;
pub mod cpuset;
pub mod device;
pub mod driver_ids;
pub mod enumerate;
pub mod env;
pub mod host;
pub mod launcher;
pub mod load;
pub mod node;
pub mod panics;
pub mod plan;
pub mod report;
pub mod slurm_release;
pub mod soft;
pub mod spec;
pub mod test_hooks;
pub mod text;
pub mod topology;
pub mod trusted_fs;

#[cfg(test)]
mod test_support;
