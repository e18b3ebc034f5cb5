//! The topology loader: the only module that talks to hwloc. (Being written.)
