//! Heterogeneous jobs and steps (`srun A : B`, `sbatch` with `hetjob` components): one
//! `--map-by-device` for all components, or a refusal before anything is allocated.
//!
//! srun, sbatch and salloc parse each component's options in turn and call the plugins'
//! `init_post_opt` once per component (Slurm 22.05, 24.11 and 26.05: `srun/opt.c`
//! `initialize_and_process_args`, `sbatch.c`, `salloc.c`). But Slurm keeps **one** value per
//! plugin option and process, and every component's slurmstepd is handed that value: the
//! launch request's option list is built from the single option cache when each component
//! is launched (`spank_set_remote_options`, `api/step_launch.c`), so it holds the last value
//! given to any component, and a component that gave none still gets it. The environment
//! copy (`_SLURM_SPANK_OPTION_...`) is srun's one environment for all components, and from
//! 24.05 slurmstepd does not read it for an option the launch request already carried
//! (`spank_stack_post_opt`). Nothing else in what slurmstepd receives tells the components
//! apart for a plugin: no spank item names the component, and every component's tasks see the
//! same `SLURM_JOB_ID` and `SLURM_HET_SIZE`. A component cannot be given its own spec, so
//! components that differ are refused here, in `init_post_opt`, naming each one's value.
//!
//! To see each component's own value, the plugin forgets the value after each component's
//! `init_post_opt` (srun.rs asks option.rs to, as the hook returns): a component that does
//! not give the option then reads as "not given" instead of inheriting the previous one. The
//! environment form (`SLURM_SPANK__SLURM_SPANK_OPTION_map_by_device_map_by_device`, also how
//! `#SBATCH --map-by-device` reaches the script's sruns) is read again by Slurm for every
//! component, so it applies to all of them alike.

use map_by_device::spec::Spec;

/// The components seen so far by this srun, sbatch or salloc, in order.
#[derive(Debug, Default)]
pub struct Components {
    /// Each component's spec in canonical form (`None`: not given).
    seen: Vec<Option<String>>,
}

/// Two components of one heterogeneous job gave different specs: the first component that
/// differs from the new one, and each one's value in canonical form (`None`: not given).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--map-by-device differs between the components of this heterogeneous job (component {first}: {}, component \
     {index}: {}): Slurm hands one value of a plugin option to every component, so they cannot be mapped \
     differently; give every component the same --map-by-device (or none to all), or run them as separate job steps",
    shown(first_value),
    shown(value)
)]
pub struct Differ {
    pub first: usize,
    pub first_value: Option<String>,
    pub index: usize,
    pub value: Option<String>,
}

/// A component's value in [`Differ`]'s message.
fn shown(value: &Option<String>) -> String {
    value.as_deref().map_or("not given".to_string(), |s| format!("{s:?}"))
}

impl Components {
    /// Records the next component's `--map-by-device` text (already validated), and refuses
    /// it if it differs from an earlier component's.
    pub fn add(&mut self, text: Option<&str>) -> Result<(), Differ> {
        let canonical = text.map(|t| Spec::parse(t).map_or_else(|_| t.trim().to_string(), |s| s.to_string()));
        let index = self.seen.len();
        self.seen.push(canonical.clone());
        match self.seen.iter().position(|other| *other != canonical) {
            None => Ok(()),
            Some(first) => Err(Differ { first, first_value: self.seen[first].clone(), index, value: canonical }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn one_component_is_always_fine() {
        for v in [None, Some("gpu"), Some("none")] {
            assert!(Components::default().add(v).is_ok());
        }
    }

    #[test]
    fn the_same_spec_in_every_spelling_is_fine() {
        let mut c = Components::default();
        c.add(Some("gpu:interleave")).unwrap();
        c.add(Some("GPU:inter")).unwrap();
        c.add(Some("gpu:interleave=package")).unwrap();
        let mut c = Components::default();
        c.add(None).unwrap();
        c.add(None).unwrap();
    }

    #[test]
    fn differing_components_are_refused_naming_both() {
        let mut c = Components::default();
        c.add(Some("gpu")).unwrap();
        let e = c.add(Some("network")).unwrap_err().to_string();
        assert!(e.contains("component 0: \"gpu\", component 1: \"network\""), "{e}");
        assert!(e.contains("give every component the same --map-by-device"), "{e}");
    }

    #[test]
    fn a_component_without_the_option_differs_from_one_with_it() {
        let mut c = Components::default();
        c.add(Some("gpu")).unwrap();
        let e = c.add(None).unwrap_err().to_string();
        assert!(e.contains("component 1: not given"), "{e}");
        let mut c = Components::default();
        c.add(None).unwrap();
        c.add(None).unwrap();
        let e = c.add(Some("none")).unwrap_err().to_string();
        assert!(e.contains("component 0: not given, component 2: \"none\""), "{e}");
    }
}
