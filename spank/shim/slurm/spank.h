/*
 * Compatibility shim for the slurm-spank crate's bindgen step (see docs/plugin.md).
 *
 * slurm-spank 0.4.1 calls spank_prepend_task_argv(), which Slurm added after 22.05. Its
 * build script runs bindgen on `#include <slurm/spank.h>`; the workspace's
 * .cargo/config.toml puts this directory first on clang's include path (CPATH), so bindgen
 * reads this file, which includes the installed header and adds the missing prototype.
 * Every other declaration, and above all the spank_item enum values (which differ between
 * Slurm releases), comes from the installed Slurm. The plugin never calls the function, so
 * the .so has no reference to it. On a Slurm that has it, the prototype is a compatible
 * redeclaration.
 */
#include_next <slurm/spank.h>

#ifndef MAP_BY_DEVICE_SPANK_SHIM
#define MAP_BY_DEVICE_SPANK_SHIM
#ifdef __cplusplus
extern "C" {
#endif
extern spank_err_t spank_prepend_task_argv(spank_t spank, int argc, const char *argv[]);
#ifdef __cplusplus
}
#endif
#endif
