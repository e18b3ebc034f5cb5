//! The SPANK plugin (being written).
