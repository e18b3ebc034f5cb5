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
