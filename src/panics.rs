//! The text of a caught panic, for the one-line errors that replace it at every boundary a
//! panic must not cross (the SPANK hooks, the hwloc bindings).

/// The panic's message (`panic!("...")` gives a `&str` or a `String`), or a placeholder.
pub fn text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic".to_string())
}

/// The one-line error that replaces a caught panic: where it happened (`in task_init`,
/// `writing the topology cache`), the panic's `text`, and the request to report it.
pub fn internal_error(place: &str, text: &str) -> String {
    format!("internal error {place}: {text} (please report this bug)")
}
