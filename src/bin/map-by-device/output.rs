//! What the commands write: the devices table, and `--svg` files written the way root may
//! write into any directory.

use crate::error::CliError;
use map_by_device::device::Device;
use std::io::Write;
use std::path::Path;

/// Human table: one row per device.
pub(crate) fn devices_table(devices: &[&Device]) -> String {
    let mut out =
        format!("{:<8} {:<13} {:<12} {:<9} {:<40} {}\n", "CLASS", "BUSID", "NAME", "VENDOR", "ID", "LOCALITY");
    for d in devices {
        let id = d.gpu_id().map(|i| i.display_id()).or_else(|| d.identity_problem().map(|_| "(none)".into()));
        out.push_str(&format!(
            "{:<8} {:<13} {:<12} {:<9} {:<40} {}{}\n",
            d.class.to_string(),
            d.busid_text(),
            d.name,
            d.vendor.name(),
            id.unwrap_or_else(|| "-".into()),
            d.locality,
            map_by_device::report::held_back_note(d)
        ));
    }
    out
}

pub(crate) fn write_svg(path: &Path, svg: &str) -> Result<(), CliError> {
    write_output(path, svg.as_bytes()).map_err(|source| CliError::WriteSvg { path: path.to_path_buf(), source })
}

/// Writes an output file (`--svg`) the way root may write into any directory, `/tmp` among
/// them: never through a symbolic link at `path`, never into a file that is there already.
/// The text goes to a new file beside `path` (`O_CREAT|O_EXCL|O_NOFOLLOW`, a name nobody
/// could have planted), which is then renamed over `path` (rename replaces the entry, and
/// follows no link). What `path` names now may be nothing or a regular file of this user's;
/// a symbolic link, another kind of file or another user's file is refused and left alone.
/// The directory is opened once and both steps are relative to it.
fn write_output(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let refuse = |why: String| Err(std::io::Error::other(why));
    let Some(name) = path.file_name() else { return refuse("not a file name".into()) };
    let dir_path = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(dir_path)?;
    let c_name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `libc::stat` is plain data: all zero bytes are a valid value of it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor, `c_name` a NUL-terminated string and `st` a
    // writable stat buffer, all alive for the call.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), c_name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc == 0 {
        // SAFETY: geteuid cannot fail and has no arguments.
        let me = unsafe { libc::geteuid() };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                return refuse("it is a symbolic link: not followed; write under a directory of your own".into())
            }
            libc::S_IFREG if st.st_uid != me => {
                return refuse(format!(
                    "the file there belongs to user {}: not replaced; write under a directory of your own",
                    st.st_uid
                ))
            }
            libc::S_IFREG => {}
            _ => return refuse("it is not a regular file: not replaced".into()),
        }
    } else {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            return Err(e);
        }
    }
    let (file, temp) = new_file_beside(&dir)?;
    let written = (&file).write_all(contents).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| {
        // SAFETY: `dir` is open, both names are NUL-terminated strings alive for the call.
        let rc = unsafe { libc::renameat(dir.as_raw_fd(), temp.as_ptr(), dir.as_raw_fd(), c_name.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    });
    if renamed.is_err() {
        // SAFETY: as for renameat; the temporary name is this process's own new file.
        unsafe { libc::unlinkat(dir.as_raw_fd(), temp.as_ptr(), 0) };
    }
    renamed
}

/// A new, empty file in `dir` under a name of this process's (`O_EXCL`: a name someone else
/// took, a file or a link, is skipped), for [`write_output`].
fn new_file_beside(dir: &std::fs::File) -> std::io::Result<(std::fs::File, std::ffi::CString)> {
    use std::os::unix::io::{AsRawFd, FromRawFd};
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for attempt in 0..64u32 {
        let name = format!(".map-by-device-{}-{:08x}.tmp", std::process::id(), nanos.wrapping_add(attempt));
        let c_name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
        // SAFETY: `dir` is an open descriptor and `c_name` a NUL-terminated string, both alive
        // for the call; the mode is the third (variadic) argument O_CREAT reads.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c_name.as_ptr(), flags, 0o666 as libc::c_uint) };
        if fd >= 0 {
            // SAFETY: `fd` was just opened by this call and is owned by nothing else.
            return Ok((unsafe { std::fs::File::from_raw_fd(fd) }, c_name));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    Err(std::io::Error::other("no free temporary name beside it"))
}
