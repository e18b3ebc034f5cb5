//! Untrusted text (names from topology and driver files, a user's option value) made safe
//! for one-line messages, reports and logs: one rule for every place that shows such text.

/// `text` by the one escaping rule of every message: printable ASCII as it is, every other
/// character as Rust escapes it (`\n`, `\u{1b}`, `\u{e9}`).
pub fn printable(text: &str) -> String {
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return text.to_string();
    }
    text.chars().flat_map(|c| if (' '..='~').contains(&c) { vec![c] } else { c.escape_default().collect() }).collect()
}

/// `text` between double quotes by the rule of [`printable`], its `"` and `\` escaped too.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.extend(c.escape_default()),
        }
    }
    out.push('"');
    out
}

/// Untrusted text quoted in a one-line message: as it is when it is short printable ASCII,
/// otherwise its start, [`quote`]d, and its length (a megabyte-long option value is not echoed
/// back, nor a newline in it).
pub fn excerpt(text: &str) -> String {
    const MAX: usize = 120;
    if text.len() <= MAX && text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return text.to_string();
    }
    let head: String = text.chars().take(MAX / 2).collect();
    let more = if head.len() < text.len() { format!("... ({} bytes)", text.len()) } else { String::new() };
    format!("{}{more}", quote(&head))
}

/// Untrusted text always between quotes in a message (a variable's value, a device's name):
/// its first 80 characters, [`quote`]d, then `...` when there is more.
pub fn quoted(text: &str) -> String {
    let head: String = text.chars().take(80).collect();
    let more = if head.len() < text.len() { "..." } else { "" };
    format!("{}{more}", quote(&head))
}

/// The longest line the plugin hands Slurm's log (bytes, before the `map-by-device: ` prefix).
pub const MAX_LOG_LINE: usize = 4096;

/// A whole message as it reaches a log or a terminal (slurmd.log, the job's stderr): one
/// line, [`printable`], at most [`MAX_LOG_LINE`] bytes (a longer one is cut and says how long
/// it was). The plugin passes every line it logs through this, whatever its parts already
/// went through: a value from the job (its spec, its environment) can then never start a
/// line of its own in slurmd.log, nor fill it.
pub fn log_line(text: &str) -> String {
    let line = printable(text);
    if line.len() <= MAX_LOG_LINE {
        return line;
    }
    // `printable` is ASCII, so any byte index is a character boundary.
    format!("{}... (cut: {} bytes)", &line[..MAX_LOG_LINE], line.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_not_printable_ascii_is_escaped() {
        assert_eq!(printable("mlx5_0 \"a\" \\"), "mlx5_0 \"a\" \\");
        assert_eq!(printable("omni\u{7f}path"), "omni\\u{7f}path");
        assert_eq!(printable("mlx5\n0"), "mlx5\\n0");
    }

    #[test]
    fn excerpts_are_short_and_one_line() {
        assert_eq!(excerpt("gpu:bogus"), "gpu:bogus");
        assert_eq!(excerpt("gpu\nverbose"), "\"gpu\\nverbose\"");
        let long = excerpt(&"x".repeat(1 << 20));
        assert!(long.ends_with("... (1048576 bytes)") && long.len() < 100, "{long}");
        assert_eq!(excerpt(&"é".repeat(2)), "\"\\u{e9}\\u{e9}\"");
    }

    #[test]
    fn quoted_text_is_always_quoted_and_cut() {
        assert_eq!(quoted("0,1"), "\"0,1\"");
        assert_eq!(quoted("a\nb\"c\\"), "\"a\\nb\\\"c\\\\\"");
        assert!(quoted(&"x".repeat(500)).ends_with("\"..."));
    }

    #[test]
    fn log_lines_are_one_bounded_printable_line() {
        assert_eq!(log_line("planned 2 tasks for gpu"), "planned 2 tasks for gpu");
        let forged = "invalid x\n[2026-12-04T15:00:00.000] error: Security violation, node drained by admin";
        let line = log_line(forged);
        assert!(!line.contains('\n') && line.contains("x\\n[2026"), "{line}");
        let long = log_line(&format!("{}\r", "v".repeat(1 << 17)));
        assert!(long.len() < MAX_LOG_LINE + 40 && long.ends_with("... (cut: 131074 bytes)"), "{long}");
        assert!(log_line("\u{1b}[2J\u{2028}").chars().all(|c| (' '..='~').contains(&c)));
    }
}
