//! The machine this process runs on: its host name, as PMIx GPU ids name the node
//! (`gpu://<host>::nvml0`). One lookup for the plugin and the CLI.

/// `gethostname()`, or `None` when it fails or is empty.
pub fn name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY:
    // - `buf` is a live, writable buffer of `buf.len()` bytes for the whole call;
    // - gethostname writes at most that many bytes (possibly without a NUL, handled below).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_the_kernels_host_name() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(super::name().as_deref(), Some(kernel.trim()));
    }
}
