//! Node boot recovery, shared by the server, iggy-fsck and the simulator: not built yet.
